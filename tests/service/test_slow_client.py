"""A slow client does not stall the service (issue 45's HTTP fuzz): while one connection trickles its body a byte
at a time, other requests are answered at once; a connection that sends headers and goes silent does not hold a
worker."""

from __future__ import annotations

import importlib.util
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("fastapi") is None, reason="needs the serve extra")
sys.path.insert(0, str(Path(__file__).parents[1]))
from service_server import serving  # noqa: E402


def _trickle(url: str, seconds: float) -> socket.socket:
    """Open a POST whose declared 100-byte body arrives one byte every 0.2 s for `seconds`."""
    host, port = url.removeprefix("http://").split(":")
    s = socket.create_connection((host, int(port)))
    s.sendall(
        b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    end = time.monotonic() + seconds
    s.sendall(b"{")
    while time.monotonic() < end:
        time.sleep(0.2)
        s.sendall(b" ")
    return s


def test_a_trickling_client_does_not_stall_the_others(tmp_path: Path) -> None:
    import threading

    with serving(tmp_path) as url:
        slow = []
        t = threading.Thread(target=lambda: slow.append(_trickle(url, 3.0)), daemon=True)
        t.start()
        time.sleep(0.5)  # the slow body is arriving
        silent = socket.create_connection(
            tuple(url.removeprefix("http://").split(":")[0:1]) + (int(url.rsplit(":", 1)[1]),)
        )
        silent.sendall(
            b"POST /api/estimate HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n"
        )  # then nothing
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert urllib.request.urlopen(url + "/api/health", timeout=5).status == 200
            times.append(time.perf_counter() - t0)
        t.join()
        for s in [*slow, silent]:
            s.close()
    assert max(times) < 1.0, times
