"""`autopar serve` under load (issue 47's benchmarks), against 127.0.0.1 on this machine.

Figures
- start-up: seconds from launching `autopar serve` to its first 200 on /api/health (median of --repeat).
- estimate: POST /api/estimate latency, p50 / p90 / p99 in ms, with `--clients` concurrent clients each sending
  `--requests` requests of distinct layouts (no two clients ask the same thing), after one warm-up request per
  worker; and the same request's in-process time (`autopar estimate --json` through the CLI object, warm) for
  comparison.
- optimize: the default problem as a job (POST /api/optimize?wait=…) against `autopar optimize --json` run
  in-process, both warm, median of --repeat.

Run: .venv/bin/python bench/service.py [--clients 20] [--requests 10] [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

TOKEN = "bench-service-token-0123456789"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, token: bool = False) -> tuple[int, dict]:
    headers = {"content-type": "application/json"} | ({"authorization": f"Bearer {TOKEN}"} if token else {})
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=600) as res:
        return res.status, json.loads(res.read())


def start(workers: int) -> tuple[subprocess.Popen, str, float]:
    """Launch the service; return it, its URL and the seconds until /api/health answered."""
    port = _port()
    env = {**os.environ, "AUTOPAR_TOKEN": TOKEN, "AUTOPAR_HOME": tempfile.mkdtemp(prefix="bench-serve-")}
    argv = [sys.executable, "-m", "autopar", "serve", "--port", str(port), "--workers", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    while True:
        try:
            urllib.request.urlopen(url + "/api/health", timeout=1).read()
            return proc, url, time.perf_counter() - t0
        except OSError:
            if proc.poll() is not None:
                raise SystemExit("autopar serve exited during start-up") from None
            time.sleep(0.02)


def _layouts(n: int) -> list[dict]:
    """n distinct small problems (8B on 8..64 GPUs, TP 1/2/4/8, micro-batch 1/2): nothing is asked twice."""
    out = []
    for gpus in (8, 16, 32, 64):
        for tp in (1, 2, 4, 8):
            for mb in (1, 2):
                for seq in (2048, 4096, 8192):
                    out.append(
                        {"model": "llama-3.1-8b", "gpus": gpus, "tp": tp, "micro_batch": mb, "seq_len": seq}
                    )
    return out[:n]


def estimate_latency(url: str, clients: int, requests: int) -> list[float]:
    bodies = _layouts(clients * requests)
    for body in bodies[:4]:  # warm each worker once
        _post(url + "/api/estimate", body)

    def client(i: int) -> list[float]:
        times = []
        for body in bodies[i * requests : (i + 1) * requests]:
            t = time.perf_counter()
            status, _ = _post(url + "/api/estimate", body)
            times.append(time.perf_counter() - t)
            assert status == 200
        return times

    with ThreadPoolExecutor(clients) as pool:
        return [t for ts in pool.map(client, range(clients)) for t in ts]


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1e3


def in_process(argv: list[str], repeat: int) -> float:
    from autopar.service.commands import run

    run(argv)  # warm
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        assert run(argv).exit_code == 0
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    starts = []
    for _ in range(args.repeat):
        proc, _, s = start(args.workers)
        starts.append(s)
        proc.terminate(), proc.wait()
    proc, url, _ = start(args.workers)
    try:
        lat = estimate_latency(url, args.clients, min(args.requests, 96 // args.clients or 1))
        jobs = []
        _post(url + "/api/optimize?wait=600", {}, token=True)  # warm
        for _ in range(args.repeat):
            t = time.perf_counter()
            _, job = _post(url + "/api/optimize?wait=600", {}, token=True)
            jobs.append(time.perf_counter() - t)
            assert job["state"] == "done"
    finally:
        proc.terminate(), proc.wait()
    est_cli = in_process(
        ["estimate", "--model", "llama-3.1-8b", "--gpus", "8", "--tp", "2", "--json"], args.repeat
    )
    opt_cli = in_process(["optimize", "--json"], args.repeat)
    print("| figure | value | target |\n|---|---|---|")
    print(
        f"| start-up to first /api/health (median of {args.repeat}) | {statistics.median(starts):.2f} s | < 2 s |"
    )
    print(
        f"| POST /api/estimate, {args.clients} clients, {len(lat)} requests: p50 | {_pct(lat, 0.5):.0f} ms | < 50 ms |"
    )
    print(f"| … p90 | {_pct(lat, 0.9):.0f} ms | |")
    print(f"| … p99 | {_pct(lat, 0.99):.0f} ms | < 200 ms |")
    print(f"| the same estimate in-process (CLI object, warm, median) | {est_cli * 1e3:.0f} ms | |")
    print(
        f"| default optimize as a job (POST …?wait, median) | {statistics.median(jobs):.2f} s | as the CLI |"
    )
    print(f"| default optimize in-process (CLI object, warm, median) | {opt_cli:.2f} s | |")
    print(f"(workers: {args.workers} quick processes; machine: {os.cpu_count()} CPUs)")


if __name__ == "__main__":
    main()
