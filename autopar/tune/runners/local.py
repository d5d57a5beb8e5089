"""Runs on this host as child processes (the `cmd:` and `dryrun` runners).

Each run starts in a session of its own (start_new_session), so a Ctrl-C that stops `autopar tune` leaves
it running: the next `tune` finds it by its process id and start time (Linux /proc; a reused id is told
apart by the start time), waits for it and reads its result. A run past its timeout (counted from the run's
own start, also for a run a later tune found again) is stopped with its whole process group (SIGTERM, then
SIGKILL after `KILL_GRACE_S`); a run whose first process ended (it finished, crashed or was killed) has
what is left of its process group stopped the same way, so no worker of it holds on to a GPU while the
next candidate runs.

A worker can leave the group (`setsid`, a launcher that daemonises) and a group id can be reused once the
group is gone, so each run also carries a token of its own in its environment (`RUN_TOKEN_VAR`, inherited
by every process it starts): what is left of a run is every process whose environment holds its token
(/proc/PID/environ), found even after its first process ended while no tune was running. A process that
clears its environment (`env -i`) or runs on another host is out of reach; SLURM jobs are cancelled by
`scancel` instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

RUN_TOKEN_VAR = "AUTOPAR_RUN_TOKEN"
ENVIRON_MAX_BYTES = 1 << 20  # of a process's environment, what is searched for a run's token
POLL_S = 0.2  # how often a run that is not our child is looked at
READ_CHUNK = 1 << 14
KILL_GRACE_S = 5.0


def process_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


def process_age(handle: Mapping[str, Any]) -> float:
    """Seconds since the process of `handle` started (its /proc start time), 0.0 when unknown."""
    try:
        ticks = int(handle.get("start") or 0)
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, TypeError):
        return 0.0


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
        token = secrets.token_hex(16)
        with open(log, "ab") as err, open(stdout or os.devnull, "wb") as out:
            proc = subprocess.Popen(  # noqa: S603 - the user's own command or autopar's
                list(argv),
                cwd=cwd,
                env={**os.environ, **env, RUN_TOKEN_VAR: token},
                stdin=subprocess.DEVNULL,
                stdout=out if stdout is not None else err,
                stderr=err if stdout is not None else subprocess.STDOUT,
                start_new_session=True,
            )
        self._children[proc.pid] = proc
        return {"pid": proc.pid, "start": process_start(proc.pid), "token": token}

    def wait(self, handle: Mapping[str, Any], timeout_s: float | None) -> tuple[int | None, bool]:
        """(exit code or None when it was not our child, timed out) once the process has ended; what is left
        of its process group is stopped either way."""
        pid = int(handle["pid"])
        proc = self._children.pop(pid, None)
        if proc is not None:
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                stop_run(handle)
                proc.wait()
                return None, True
            stop_run(handle)  # its workers, if the run's first process did not take them with it
            return code, False
        return None, _poll(handle, timeout_s)


def _poll(handle: Mapping[str, Any], timeout_s: float | None) -> bool:
    """Wait for a process that is not our child (a run a killed tune launched); True when it ran past
    `timeout_s` from its own start and was stopped."""
    left = None if timeout_s is None else timeout_s - process_age(handle)
    deadline = None if left is None else time.monotonic() + left
    seen = False
    while alive(handle):
        seen = True
        if deadline is not None and time.monotonic() >= deadline:
            stop_run(handle)
            return True
        time.sleep(POLL_S)
    # it ended while we watched: its process id still names its group (not a reused id); else only its token
    stop_run(handle, group=seen)
    return False


def stop_run(handle: Mapping[str, Any], group: bool = True) -> None:
    """Stop what is left of a run: its process group (`group`: only while the group id is known to be the
    run's) and every process that carries its token, wherever its group or parent."""
    if group:
        stop_group(int(handle["pid"]))
    token = str(handle.get("token") or "")
    if token:
        _stop_pids(lambda: token_processes(token))


def stop_leftovers(handle: Mapping[str, Any]) -> None:
    """Stop the processes a run left behind when it ended while no tune watched it (by its token only: its
    group id may belong to someone else by now)."""
    stop_run(handle, group=False)


def token_processes(token: str) -> list[int]:
    """Running (not zombie) processes whose environment holds RUN_TOKEN_VAR=token, this one excepted."""
    needle = f"{RUN_TOKEN_VAR}={token}".encode()
    out = []
    for e in _pids():
        if e == os.getpid():
            continue
        try:
            with open(f"/proc/{e}/environ", "rb") as f:
                env = f.read(ENVIRON_MAX_BYTES)
            state = Path(f"/proc/{e}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and needle in env.split(b"\0"):
            out.append(e)
    return out


def _pids() -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []


def _stop_pids(find: Callable[[], list[int]]) -> None:
    """SIGTERM what `find()` returns, then SIGKILL what is still there after KILL_GRACE_S."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = find()
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        end = time.monotonic() + KILL_GRACE_S
        while find() and time.monotonic() < end:
            time.sleep(0.05)


def stop_group(pid: int) -> None:
    """SIGTERM the process group of `pid`, SIGKILL what is still running of it after KILL_GRACE_S, and wait
    (KILL_GRACE_S at most) until nothing of it runs. A group of zombies (ended, not yet reaped) is gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not group_running(pid):
            return
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        end = time.monotonic() + KILL_GRACE_S
        while group_running(pid) and time.monotonic() < end:
            time.sleep(0.05)


def group_running(pgid: int) -> bool:
    """True while a process of group `pgid` runs (is not a zombie): killpg(0) first, /proc when it finds one
    (a zombie counts for kill but holds no GPU)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = [e for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return True
    for e in entries:
        try:
            fields = Path(f"/proc/{e}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def bounded_output(
    proc: subprocess.Popen[bytes], max_bytes: int, timeout_s: float
) -> tuple[bytes, bytes, str]:
    """(stdout, stderr, why) of a short command: both read at most `max_bytes` each; `why` says how it was
    stopped ('printed more than N bytes', 'took longer than S s'), '' when it ended by itself. Memory is
    bounded whatever the command prints, and it is killed the moment it prints too much."""
    bufs: list[bytearray] = [bytearray(), bytearray()]
    over = threading.Event()

    def drain(stream: Any, buf: bytearray) -> None:
        while chunk := stream.read1(READ_CHUNK) if hasattr(stream, "read1") else stream.read(READ_CHUNK):
            if len(buf) + len(chunk) > max_bytes:
                over.set()
                proc.kill()
                return
            buf += chunk

    threads = [
        threading.Thread(target=drain, args=(s, b), daemon=True)
        for s, b in zip((proc.stdout, proc.stderr), bufs, strict=True)
    ]
    for t in threads:
        t.start()
    why = ""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        why = f"took longer than {timeout_s:g} s"
    for t in threads:
        t.join(timeout=1.0)
    if over.is_set():
        why = f"printed more than {max_bytes:,} bytes"
    return bytes(bufs[0]), bytes(bufs[1]), why
