"""Start the slice's ranks (one process per GPU, or gloo processes on CPU), collect their results, and turn
a failing or hung rank into one line.

Each rank is `python -m autopar.dryrun.worker FOLDER` with the torchrun environment (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK): a fresh interpreter that imports torch and the slice only, not the
CLI. The job is JSON in a private temporary folder; each rank writes its result (or one error line) there.
The parent polls the ranks with a deadline and stops the ones it started when one fails or time runs out.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from autopar.dryrun.errors import DryrunFailed
from autopar.dryrun.plan import SlicePlan, plan_to_json
from autopar.text import one_line

POLL_S = 0.1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(folder: str, world: int) -> list[subprocess.Popen]:
    port = str(_free_port())
    procs = []
    for rank in range(world):
        env = {**os.environ, "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        log = open(Path(folder, f"rank{rank}.log"), "wb")  # noqa: SIM115 - closed with the process
        cmd = [sys.executable, "-m", "autopar.dryrun.worker", folder]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    """Stop the ranks this launch started that are still running."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _failure(folder: str, rank: int, code: int) -> str:
    """One line: the rank, and its error line (or its log's last line, or its exit code)."""
    err = Path(folder, f"rank{rank}.error")
    if err.exists():
        return f"rank {rank} failed: {one_line(err.read_text(encoding='utf-8'))[:400]}"
    lines = Path(folder, f"rank{rank}.log").read_text(encoding="utf-8", errors="replace").strip().splitlines()
    tail = f": {one_line(lines[-1])[:400]}" if lines else ""
    return f"rank {rank} exited with code {code}{tail}"


def _wait(procs: list[subprocess.Popen], folder: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        # the first rank to fail, by its error file when several did (the others often only timed out)
        if bad:
            with_error = [rc for rc in bad if Path(folder, f"rank{rc[0]}.error").exists()]
            raise DryrunFailed(_failure(folder, *(with_error or bad)[0]))
        if all(c == 0 for c in codes):
            return
        if time.monotonic() > deadline:
            raise DryrunFailed(
                f"the dry-run did not finish within {timeout_s:g} s (--timeout); ranks stopped"
            )
        time.sleep(POLL_S)


def run_ranks(
    tasks: list[tuple[str, SlicePlan]], *, steps: int = 0, warmup: int = 0, timeout_s: float = 300
) -> list[list[dict]]:
    """Run each (mode, plan) task, mode 'check' or 'measure', in one set of processes (the plans share their
    world size and device); for each rank, in rank order, one result per task."""
    first = tasks[0][1]
    if any(p.degrees.world != first.degrees.world or p.device != first.device for _, p in tasks):
        raise ValueError("the tasks of one launch must share the world size and the device")
    world = first.degrees.world
    with tempfile.TemporaryDirectory(prefix="autopar-dryrun-") as folder:
        job = {
            "tasks": [{"mode": mode, "plan": plan_to_json(p)} for mode, p in tasks],
            "steps": steps,
            "warmup": warmup,
            "timeout_s": timeout_s,
        }
        Path(folder, "job.json").write_text(json.dumps(job), encoding="utf-8")
        procs = _start(folder, world)
        try:
            _wait(procs, folder, timeout_s)
        finally:
            _stop(procs)
        return [json.loads(Path(folder, f"rank{r}.json").read_text(encoding="utf-8")) for r in range(world)]


def pick_device(device: str, ranks: int | None) -> tuple[str, int]:
    """(cuda or cpu, ranks to run) for --device auto|cuda|cpu and --ranks. The parent creates no CUDA context
    (that would take memory from GPU 0): the ranks report the GPU's name."""
    from autopar.dryrun.plan import DEFAULT_CPU_RANKS, MAX_CPU_RANKS
    from autopar.errors import SpecError

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and not gpus:
        raise SpecError("--device cuda: PyTorch sees no CUDA GPU on this host (use --device cpu or auto)")
    if device == "cuda" or (device == "auto" and gpus):
        n = ranks or gpus
        if n > gpus:
            raise SpecError(f"--ranks {n}: this host has {gpus} GPU(s)")
        return "cuda", n
    n = ranks or DEFAULT_CPU_RANKS
    if n > MAX_CPU_RANKS:
        raise SpecError(f"--ranks {n}: a CPU run takes at most {MAX_CPU_RANKS} ranks (gloo processes)")
    return "cpu", n
