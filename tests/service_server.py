"""`autopar serve` started as a user starts it (a subprocess on a free port, a write token, its own store), for the
tests that need a real server: the browser tests and the slow-client test."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOKEN = "browser-test-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def serving(home: Path, *args: str) -> Iterator[str]:
    """Run `autopar serve` until the block ends; yields its base URL once /api/health answers."""
    port = free_port()
    env = {**os.environ, "AUTOPAR_TOKEN": TOKEN, "AUTOPAR_HOME": str(home)}
    argv = [
        sys.executable,
        "-m",
        "autopar",
        "serve",
        "--port",
        str(port),
        "--max-jobs",
        "1",
        "--workers",
        "1",
        *args,
    ]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/api/health", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None:
                    raise RuntimeError(proc.stdout.read().decode() if proc.stdout else "exited") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)
