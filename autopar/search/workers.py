"""`--workers K`: K processes on this host cooperating on one stored study, and the stored-study inputs.

Each worker is an ordinary `optimize` call on the same storage and study name with its own seed
(seed + i); they share the budget (study-wide COMPLETE trials) through the storage. Processes are
started with the "spawn" method so no database connection or thread is inherited.

Faults: this process searches too, so the study reaches its budget even when a worker dies (its
unfinished trial is failed as stale on a server; on a file it had written nothing partial). A dead or
failed worker becomes a note on the result, never an exception in the parent (on a server, the
parent first waits out the grace period of the trial it left RUNNING and fails it); each worker reports
back through its own one-way pipe (no shared queue whose lock a killed process could hold). SIGTERM
to the parent stops the workers (SIGTERM, then SIGKILL after STOP_GRACE_S) and exits as interrupted;
a worker whose parent disappears (SIGKILL) stops within ORPHAN_CHECK_S.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from autopar.errors import AutoparError
from autopar.search.shared import settle_stale

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess
    from types import FrameType

    from autopar.search.result import SearchResult

STOP_GRACE_S = 10.0  # a worker asked to stop gets this long to flush its trials before SIGKILL
ORPHAN_CHECK_S = 0.5  # how often a worker checks that its parent is alive
# Once this process's search is over the study is at its budget (or out of time); workers notice at
# their next sync (about a second, or a stale-trial grace period on a server). Longer means stuck.
FINISH_WAIT_S = 120.0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _watch_parent(parent: int) -> None:
    """Stop this worker (as if interrupted: trials flushed) when its parent is gone."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _worker(kwargs: dict[str, Any], conn: Connection, parent: int) -> None:
    """Child process body: one optimize call; the outcome goes back as (exit code, one line)."""
    from autopar.search.study import optimize

    signal.signal(signal.SIGTERM, _interrupt)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    outcome: tuple[int, str] = (0, "")
    try:
        optimize(**kwargs)
    except KeyboardInterrupt:  # Ctrl-C / SIGTERM: the parent says "interrupted"
        outcome = (130, "interrupted")
    except AutoparError as e:
        outcome = (e.exit_code, str(e))
    except Exception as e:  # noqa: BLE001 - reported by the parent as one line
        outcome = (1, f"{type(e).__name__}: {e}")
    with contextlib.suppress(OSError):
        conn.send(outcome)


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """In the main thread, SIGTERM raises KeyboardInterrupt (so `finally` stops the workers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _stop(procs: Sequence[BaseProcess]) -> None:
    """SIGTERM every live worker, wait up to STOP_GRACE_S, then SIGKILL what is left."""
    for p in procs:
        if p.is_alive():
            with contextlib.suppress(OSError):
                p.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(5)


def _problems(procs: Sequence[BaseProcess], pipes: list[Connection]) -> list[tuple[int, str]]:
    """(exit code, line) of every worker that did not finish cleanly."""
    out = []
    for p, conn in zip(procs, pipes, strict=True):
        code, line = 0, ""
        with contextlib.suppress(EOFError, OSError):
            if conn.poll():
                code, line = conn.recv()
        if not code and p.exitcode not in (0, None):
            sig = -p.exitcode if p.exitcode < 0 else None
            how = f"was killed by signal {sig}" if sig else f"exited with code {p.exitcode}"
            code, line = 1, f"{p.name} {how}"
        elif code:
            line = f"{p.name}: {line}"
        if code:
            out.append((code, line))
    return out


def run_workers(workers: int, kwargs: dict[str, Any]) -> SearchResult:
    """Run `workers` cooperating optimize processes (this one included); return the study's result.

    The result's wall_s covers the whole run; a worker that died or failed while this process still
    brought the study to its end is a note. KeyboardInterrupt (Ctrl-C, SIGTERM) stops every worker."""
    from autopar.problem import SearchSettings, settings_with
    from autopar.search.study import optimize

    t0 = time.perf_counter()
    fields = {k: v for k, v in kwargs.items() if k in SearchSettings.model_fields}
    settings = settings_with(kwargs.get("settings"), fields)
    kwargs = {**{k: v for k, v in kwargs.items() if k not in fields}, "settings": settings}
    if workers < 1:
        raise AutoparError(f"workers={workers}: must be at least 1")
    if workers > 1 and settings.storage is None:
        raise AutoparError(
            "workers: several workers share a stored study; give --storage (a journal file, "
            "sqlite:///file.db or postgresql://...)"
        )
    if workers == 1:
        return optimize(**kwargs)
    ctx = mp.get_context("spawn")
    seed = settings.seed
    procs, pipes = [], []
    with _sigterm_interrupts():
        try:
            for i in range(1, workers):
                recv, send = ctx.Pipe(duplex=False)
                kw = {**kwargs, "settings": settings.model_copy(update={"seed": seed + i}), "progress": False}
                p = ctx.Process(target=_worker, args=(kw, send, os.getpid()), name=f"autopar-worker-{i}")
                p.daemon = True
                p.start()
                send.close()
                procs.append(p)
                pipes.append(recv)
            optimize(**kwargs)
            deadline = time.monotonic() + FINISH_WAIT_S
            for p in procs:  # they stop by themselves at the budget
                p.join(max(0.0, deadline - time.monotonic()))
        finally:
            _stop(procs)
        problems = _problems(procs, pipes)
        result = optimize(**{**kwargs, "search": False, "progress": False})
        if problems and result.stats["study_states"].get("RUNNING"):  # a dead worker's unfinished trial
            settle_stale(settings.storage, result.stats["study_name"], settings.heartbeat_s)
            result = optimize(**{**kwargs, "search": False, "progress": False})
    for _code, line in problems:
        result.notes.append(f"{line}; the other workers finished the study")
    result.wall_s = time.perf_counter() - t0
    return result
