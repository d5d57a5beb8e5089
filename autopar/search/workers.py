"""`--workers K`: K processes on this host cooperating on one stored study, and the stored-study inputs.

Each worker is an ordinary `optimize` call on the same storage and study name with its own seed
(seed + i); they share the budget (study-wide COMPLETE trials) through the storage. Processes are
started with the "spawn" method so no database connection or thread is inherited.
"""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from autopar.errors import AutoparError


def _worker(kwargs: dict[str, Any], errors: Any) -> None:
    """Child process body: one optimize call; any failure is sent back as one line."""
    from autopar.search.study import optimize

    try:
        optimize(**kwargs)
    except KeyboardInterrupt:  # Ctrl-C reaches every worker; the parent says "interrupted"
        return
    except AutoparError as e:
        errors.put(str(e))
    except Exception as e:  # noqa: BLE001 - reported by the parent as one line
        errors.put(f"{type(e).__name__}: {e}")


def run_workers(workers: int, kwargs: dict[str, Any]) -> Any:
    """Run `workers` cooperating optimize processes (this one included); return the study's result."""
    from autopar.search.study import optimize

    if workers < 1:
        raise AutoparError(f"workers={workers}: must be at least 1")
    if workers > 1 and kwargs.get("storage") is None:
        raise AutoparError(
            "workers: several workers share a stored study; give --storage (a journal file, "
            "sqlite:///file.db or postgresql://...)"
        )
    if workers == 1:
        return optimize(**kwargs)
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    seed = int(kwargs.get("seed", 0))
    procs = [
        ctx.Process(
            target=_worker,
            args=({**kwargs, "seed": seed + i, "progress": False}, errors),
            name=f"autopar-worker-{i}",
        )
        for i in range(1, workers)
    ]
    for p in procs:
        p.start()
    try:
        optimize(**kwargs)
    finally:
        for p in procs:
            p.join()
    problems = []
    while not errors.empty():
        problems.append(errors.get())
    problems += [f"{p.name} exited with code {p.exitcode}" for p in procs if p.exitcode not in (0, None)]
    if problems:
        raise AutoparError(f"workers: {len(problems)} worker(s) failed: {problems[0]}")
    return optimize(**{**kwargs, "search": False, "progress": False})
