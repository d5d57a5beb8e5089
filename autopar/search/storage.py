"""Where a study lives: in memory (default), an Optuna journal file, SQLite, or a database server.

`--storage` takes a journal file path (the default for a file: fast, no server), an SQLAlchemy URL
``sqlite:///study.db``, or a server URL ``postgresql://user:password@host:5432/db`` (also
``mysql://...``). Server storages get Optuna heartbeats, so a worker killed mid-trial leaves a trial
that `fail_stale_trials` turns FAILED after the grace period (optuna.storages.RDBStorage,
heartbeat_interval / grace_period); a RUNNING trial that never recorded a heartbeat (its process
died between creating it and its first beat, or another Optuna client's `study.ask()`) is failed
the same way, counting from its datetime_start. A server connection lost mid-run is retried with
backoff for RECONNECT_S seconds, then a StorageError (exit code 3). Problems opening a storage
become one line naming it with its password masked: a malformed URL or path is bad input
(AutoparError, exit 2), a server that cannot be reached is a StorageError.

Journal files are written by `_JournalFile`: an append that fails (a full disk) is cut back so it
leaves no partial record, and a torn last line left by another writer is dropped before the next
append, keeping every complete record. Only regular files are used; read-only commands
(`create=False`) never create one.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from autopar.errors import AutoparError, StorageError
from autopar.files import expand_user
from autopar.search.optuna_compat import (
    RDB_LOGGER,
    STALE_TRIAL_IDS_HOOK,
    running_without_heartbeat,
    stale_trial_ids_extended,
)

HEARTBEAT_S = 10  # default seconds between a server worker's heartbeats (RDBStorage heartbeat_interval)
GRACE_FACTOR = 3  # a RUNNING trial silent for GRACE_FACTOR x heartbeat is failed (grace_period)
CREATE_RETRIES = 5  # attempts when several workers create the tables of an empty database at once
# A database server that goes away mid-run (restart, fail-over, network cut) is retried this long,
# with doubling pauses from RECONNECT_FIRST_S up to RECONNECT_MAX_PAUSE_S, before the run stops with
# a StorageError. The environment variable overrides it (seconds; tests use a short one).
RECONNECT_S = 60.0
RECONNECT_ENV = "AUTOPAR_RECONNECT_S"
RECONNECT_FIRST_S = 0.25
RECONNECT_MAX_PAUSE_S = 5.0
SERVER_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb")
DRIVERS = {  # URL scheme -> (module SQLAlchemy imports by default, pip package that provides it)
    "postgresql": ("psycopg", "psycopg[binary] (pip install 'autopar[postgres]')"),
    "mysql": ("MySQLdb", "mysqlclient"),
}
# Exception classes (of SQLAlchemy or the driver) that mean "the connection is gone", not "bad query".
CONNECTION_LOST = ("OperationalError", "InterfaceError", "DisconnectionError")


def mask(url: str) -> str:
    """The URL with its password replaced by ***: in user:password@ and in a password= query parameter
    (libpq and SQLAlchemy accept both)."""
    url = re.sub(r"(://[^:/@]+:)[^/?#]*@", r"\1***@", url)  # up to the last @ of the authority
    return re.sub(r"([?&](?:password|passwd|pwd)=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def scheme(spec: str) -> str:
    """'postgresql', 'sqlite', ... for a URL; 'journal' for a file path."""
    if "://" not in spec:
        return "journal"
    head = spec.split("://", 1)[0].split("+", 1)[0].lower()
    return "postgresql" if head == "postgres" else head


def is_server(spec: Any) -> bool:
    """True for a database-server URL (workers on several hosts, heartbeats)."""
    return isinstance(spec, str) and scheme(spec) in SERVER_SCHEMES


def open_storage(spec: Any, heartbeat_s: int | None = None, *, create: bool = True) -> Any:
    """An Optuna storage for `spec` (None -> None = in memory; objects pass through).

    create=False (read-only commands) refuses a journal or SQLite file that does not exist instead
    of creating an empty one."""
    if spec is None or not isinstance(spec, str | Path):
        return spec
    s = str(spec)
    kind = scheme(s)
    if kind == "journal":
        return _journal(s, create)
    from optuna.storages import RDBStorage, get_storage

    if s.startswith("postgres://"):
        s = "postgresql" + s[len("postgres") :]
    if s.startswith("postgresql://"):
        s = _pg_driver(s)
    kw: dict[str, Any] = {}
    cls: Any = RDBStorage
    if kind in SERVER_SCHEMES:
        hb = heartbeat_s or HEARTBEAT_S
        kw = {"heartbeat_interval": hb, "grace_period": GRACE_FACTOR * hb}
        cls = _server_storage_class()
    elif kind == "sqlite":
        _check_sqlite_file(s, create)
    for attempt in range(CREATE_RETRIES + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeat_interval is flagged experimental
                st = get_storage(cls(s, **kw))
            return _with_reconnect(st, s) if kind in SERVER_SCHEMES else st
        except Exception as e:  # noqa: BLE001 - every failure to reach the storage becomes one line
            # Workers starting together on an empty database race to create Optuna's tables; the
            # losers see "already exists" / a unique violation and simply retry.
            text = str(e).lower()
            racing = "already exists" in text or "duplicate key" in text or "unique constraint" in text
            if not racing or attempt == CREATE_RETRIES:
                raise storage_error(s, e) from e
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def reconnect_s() -> float:
    """Seconds a lost server connection is retried (RECONNECT_ENV overrides RECONNECT_S)."""
    raw = os.environ.get(RECONNECT_ENV, "")
    try:
        value = float(raw) if raw else RECONNECT_S
    except ValueError:
        value = RECONNECT_S
    return value if 0 <= value < float("inf") else RECONNECT_S


def connection_lost(e: BaseException) -> bool:
    """Whether `e` (or what caused it) says the database connection is gone."""
    seen: list[BaseException] = []
    x: BaseException | None = e
    while x is not None and len(seen) < 8 and x not in seen:
        seen.append(x)
        mod = type(x).__module__
        if type(x).__name__ in CONNECTION_LOST and mod.startswith(("sqlalchemy", "psycopg", "MySQLdb")):
            return True
        if isinstance(x, ConnectionError):
            return True
        x = x.__cause__ or x.__context__
    return False


def _with_reconnect(storage: Any, url: str) -> Any:
    """Make every storage call retry a lost connection with backoff for reconnect_s() seconds, then
    raise a StorageError. A call that committed just before the connection dropped may run twice
    (at worst one extra RUNNING trial, which then has no heartbeat and is failed as stale)."""
    names = [n for n in dir(type(storage)) if not n.startswith("__")]
    for name in names:
        if name.startswith("_") and name != STALE_TRIAL_IDS_HOOK:
            continue
        fn = getattr(storage, name, None)
        if callable(fn):
            setattr(storage, name, _retrying(fn, url))
    return storage


def _retrying(fn: Any, url: str) -> Any:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        deadline, pause = None, RECONNECT_FIRST_S
        while True:
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                if not connection_lost(e):
                    raise
                limit, now = reconnect_s(), time.monotonic()
                if deadline is None:
                    deadline = now + limit
                    sys.stderr.write(
                        f"storage={mask(url)}: connection lost; retrying for up to {limit:g} s\n"
                    )
                if now >= deadline:
                    raise StorageError(
                        f"storage={mask(url)}: lost the connection to the database server and could not "
                        f"reconnect within {limit:g} s ({_first_line(e)}); the study keeps every finished "
                        "trial: re-run the same command to resume"
                    ) from None
                time.sleep(min(pause, deadline - now))
                pause = min(2 * pause, RECONNECT_MAX_PAUSE_S)

    return call


def _first_line(e: BaseException) -> str:
    """The first line of the innermost cause (the driver's words, not Optuna's wrapper)."""
    for _ in range(8):  # bounded: a chain can loop
        inner = e.__cause__ or e.__context__
        if inner is None:
            break
        e = inner
    detail = str(getattr(e, "orig", None) or e).strip().splitlines()
    return mask(detail[0]) if detail else type(e).__name__


class _LostConnectionNoise(logging.Filter):
    """Drops Optuna's multi-line "Caught an error from sqlalchemy ... Falling back" warning, which a lost
    server connection raises inside `get_all_trials`: `_with_reconnect` reports the loss in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Caught an error from sqlalchemy")


def _quiet_rdb_fallback_warning() -> None:
    rdb_logger = logging.getLogger(RDB_LOGGER)
    if not any(isinstance(f, _LostConnectionNoise) for f in rdb_logger.filters):
        rdb_logger.addFilter(_LostConnectionNoise())


def _server_storage_class() -> type:
    """RDBStorage whose stale-trial check also fails RUNNING trials that never recorded a heartbeat
    once their datetime_start is older than the grace period (Optuna skips them for ever)."""
    from optuna.storages import RDBStorage

    _quiet_rdb_fallback_warning()
    return stale_trial_ids_extended(RDBStorage, _beatless_trial_ids)


def _beatless_trial_ids(storage: Any, study_id: int) -> list[int]:
    """RUNNING trials without a heartbeat that started longer than the grace period ago."""
    grace = timedelta(seconds=storage.grace_period or 2 * (storage.heartbeat_interval or HEARTBEAT_S))
    now = datetime.now()  # datetime_start reads as naive local time
    starts = running_without_heartbeat(storage, study_id)
    return [tid for tid, start in starts if start is None or now - start > grace]


def storage_error(url: str, e: BaseException) -> AutoparError:
    """One line for a storage failure: missing driver, cannot connect, bad URL."""
    kind = scheme(url)
    where = f"storage={mask(url)}"
    chain = [e]
    while chain[-1].__cause__ is not None and len(chain) < 5:
        chain.append(chain[-1].__cause__)
    if any(isinstance(x, ImportError) for x in chain):
        _mod, pkg = DRIVERS.get(kind, ("", "the database driver"))
        return AutoparError(f"{where}: the {kind} driver is not installed; install {pkg}")
    name = type(e).__name__
    detail = str(getattr(e, "orig", None) or e).strip().splitlines()
    text = detail[0] if detail else name
    if name == "ArgumentError" or "Could not parse" in text:
        return AutoparError(
            f"{where}: not a database URL ({text}); use postgresql://user:password@host:5432/db, "
            "sqlite:///file.db or a journal file path"
        )
    return StorageError(f"{where}: cannot open the study storage: {mask(text)}")


def _pg_driver(url: str) -> str:
    """Name psycopg 3 explicitly when SQLAlchemy's default for postgresql:// (psycopg2 before 2.1)
    is not installed but psycopg 3 is."""
    import importlib.util

    from sqlalchemy.engine import make_url

    try:
        default = make_url(url).get_dialect().driver
    except Exception:  # noqa: BLE001 - a malformed URL is reported when the engine is created
        return url
    if importlib.util.find_spec(default) is None and importlib.util.find_spec("psycopg") is not None:
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _journal(path: str, create: bool = True) -> Any:
    from optuna.storages import JournalStorage

    p = _checked_file(path, path, create)
    try:
        return JournalStorage(_journal_backend()(str(p), path))
    except AutoparError:
        raise
    except Exception as e:  # noqa: BLE001 - unreadable or corrupt journal
        raise AutoparError(f"storage={path!r}: not an Optuna journal file ({type(e).__name__}: {e})") from e


def _checked_file(path: str, shown: str, create: bool) -> Path:
    """The file behind a journal or SQLite storage: its folder exists, it is a regular file (not a
    folder, device or pipe, which would be read without end), and it exists unless `create`."""
    try:
        p = expand_user(path)
        folder = p.resolve().parent
        ok, exists, regular = folder.is_dir(), p.exists(), p.is_file()
    except (OSError, ValueError, RuntimeError) as e:  # e.g. an embedded NUL byte, a symlink loop
        raise AutoparError(f"storage={shown!r}: not a usable file path ({e})") from None
    if not ok:
        raise AutoparError(f"storage={shown!r}: folder {folder} does not exist")
    if exists and p.is_dir():
        raise AutoparError(f"storage={shown!r}: is a folder; give a journal file path")
    if exists and not regular:
        raise AutoparError(f"storage={shown!r}: not a regular file (a device, pipe or socket)")
    if not exists and not create:
        raise AutoparError(f"storage={shown!r}: no such file (a study is created by `autopar optimize`)")
    return p


def _check_sqlite_file(url: str, create: bool) -> None:
    path = url.split(":///", 1)[-1] if ":///" in url else ""
    if not path or path == ":memory:":
        return
    _checked_file(path, url, create)


def _journal_backend() -> type:
    """JournalFileBackend whose appends are all-or-nothing and which repairs a torn last line."""
    from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock

    class JournalFile(JournalFileBackend):
        def __init__(self, file_path: str, shown: str):
            # the lock JournalFileBackend makes by default, made here to hold it in append_logs
            self.lock, self.path, self.shown = JournalFileSymlinkLock(file_path), file_path, shown
            super().__init__(file_path, lock_obj=self.lock)

        def read_logs(self, log_number_from: int) -> Any:
            n = log_number_from
            try:
                for log in super().read_logs(log_number_from):
                    yield log
                    n += 1
            except ValueError as e:  # json.JSONDecodeError included
                raise StorageError(
                    f"storage={self.shown!r}: the journal is damaged after record {n} ({e}); records "
                    "after that point cannot be read"
                ) from None

        def append_logs(self, logs: list[dict[str, Any]]) -> None:
            data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode()
            try:
                with _holding(self.lock):
                    _append_whole(self.path, data)
            except (OSError, RuntimeError) as e:
                if _interrupted(e):  # Ctrl-C/SIGTERM while Optuna released its lock file
                    raise KeyboardInterrupt from None
                if isinstance(e, RuntimeError):
                    raise
                raise StorageError(_write_failure(self.shown, e)) from None

    return JournalFile


@contextlib.contextmanager
def _holding(lock: Any) -> Iterator[None]:
    """Hold a journal file lock (BaseJournalFileLock's public acquire/release) for a block."""
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _interrupted(e: BaseException) -> bool:
    """Whether `e` was raised while handling a KeyboardInterrupt."""
    x: BaseException | None = e
    for _ in range(8):
        if x is None:
            return False
        if isinstance(x, KeyboardInterrupt):
            return True
        x = x.__context__
    return False


def _append_whole(path: str, data: bytes) -> None:
    """Append `data` after the last complete line of `path` (a torn last line, from a writer that
    died or a full disk, is dropped); on failure cut the file back so no partial record stays."""
    fd = os.open(path, os.O_RDWR)
    try:
        end = _complete_end(fd)
        if end != os.fstat(fd).st_size:
            os.ftruncate(fd, end)
        try:
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], end + done)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):  # the next writer drops a torn tail too
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)


def _complete_end(fd: int, chunk: int = 1 << 16) -> int:
    """Byte offset just after the last newline of the file (0 when it has none)."""
    size = os.fstat(fd).st_size
    pos = size
    while pos > 0:
        start = max(0, pos - chunk)
        block = os.pread(fd, pos - start, start)
        if pos == size and block.endswith(b"\n"):
            return size
        i = block.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def _write_failure(shown: str, e: OSError) -> str:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"storage={shown!r}: the disk is full (no space left to write the journal); nothing partial "
            "was kept: free space and re-run the same command to resume"
        )
    return f"storage={shown!r}: cannot write the journal: {e.strerror or e}"
