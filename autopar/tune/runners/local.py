"""Runs on this host as child processes (the `cmd:` and `dryrun` runners).

Each run starts in a session of its own (start_new_session), so a Ctrl-C that stops `autopar tune` leaves
it running: the next `tune` finds it by its process id and start time (Linux /proc; a reused id is told
apart by the start time), waits for it and reads its result. A run past its timeout is stopped with its
whole process group (SIGTERM, then SIGKILL after `KILL_GRACE_S`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

POLL_S = 0.2  # how often a run that is not our child is looked at
KILL_GRACE_S = 5.0


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def alive(handle: Mapping[str, Any]) -> bool:
    """True while the process of `handle` runs (same pid and start time; not a zombie)."""
    pid = int(handle.get("pid") or 0)
    if pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and process_start(pid) == handle.get("start")


class Processes:
    """The child processes a runner started, by pid (to read their exit codes)."""

    def __init__(self) -> None:
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path, log: Path, stdout: Path | None = None
    ) -> dict[str, Any]:
        """Start `argv` with its output in `log` (its standard output in `stdout` when given); the handle
        {pid, start}."""
        with open(log, "ab") as err, open(stdout or os.devnull, "wb") as out:
            proc = subprocess.Popen(  # noqa: S603 - the user's own command or autopar's
                list(argv),
                cwd=cwd,
                env={**os.environ, **env},
                stdin=subprocess.DEVNULL,
                stdout=out if stdout is not None else err,
                stderr=err if stdout is not None else subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        return {"pid": proc.pid, "start": process_start(proc.pid)}

    def wait(self, handle: Mapping[str, Any], timeout_s: float | None) -> tuple[int | None, bool]:
        """(exit code or None when it was not our child, timed out) once the process has ended."""
        pid = int(handle["pid"])
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        proc = self._children.pop(pid, None)
        if proc is not None:
            try:
                return proc.wait(timeout=timeout_s), False
            except subprocess.TimeoutExpired:
                stop_group(pid)
                proc.wait()
                return None, True
        while alive(handle):
            if deadline is not None and time.monotonic() > deadline:
                stop_group(pid)
                return None, True
            time.sleep(POLL_S)
        return None, False


def stop_group(pid: int) -> None:
    """SIGTERM the process group of `pid`, SIGKILL it if it is still there after KILL_GRACE_S."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        end = time.monotonic() + grace
        while time.monotonic() < end:
            try:
                os.killpg(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
