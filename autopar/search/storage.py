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
append, keeping every complete record. Every complete record read is checked (`journal_record`): one
that Optuna could not replay (a foreign or garbled line) stops the reading with one line naming its
line and byte offset, and `repair_journal` (`autopar study repair`) keeps the records before it. Only
regular files are used; read-only commands (`create=False`) never create one. A SQLite file that is
not a database or is corrupt is reported in one line naming it, when opened and on any later call.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import logging
import os
import re
import shlex
import sys
import time
import warnings
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING, ParamSpec, TypeAlias, TypedDict, TypeVar, overload

from autopar.errors import AutoparError, StorageError, install_hint
from autopar.files import expand_user, write_atomic
from autopar.search.jsontypes import JSONDict, JSONValue
from autopar.search.optuna_compat import (
    RDB_LOGGER,
    STALE_TRIAL_IDS_HOOK,
    running_without_heartbeat,
    stale_trial_ids_extended,
)
from autopar.text import mask as mask  # also imported from here (study.py, stored.py, the CLI)

if TYPE_CHECKING:
    from optuna.storages import BaseStorage, JournalStorage, RDBStorage
    from optuna.storages.journal import JournalFileSymlinkLock

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
    "postgresql": ("psycopg", "psycopg[binary] (extra 'postgres')"),
    "mysql": ("MySQLdb", "mysqlclient"),
}
# Exception classes (of SQLAlchemy or the driver) that mean "the connection is gone", not "bad query".
CONNECTION_LOST = ("OperationalError", "InterfaceError", "DisconnectionError")

# What a storage= option holds: a URL or journal path (None = in memory), or an Optuna storage, passed through.
StorageSpec: TypeAlias = "str | Path | BaseStorage | None"
_S = TypeVar("_S")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class _HeartbeatKw(TypedDict, total=False):
    """RDBStorage's heartbeat keywords, set on a server storage."""

    heartbeat_interval: int
    grace_period: int


def scheme(spec: str) -> str:
    """'postgresql', 'sqlite', ... for a URL; 'journal' for a file path."""
    if "://" not in spec:
        return "journal"
    head = spec.split("://", 1)[0].split("+", 1)[0].lower()
    return "postgresql" if head == "postgres" else head


def is_server(spec: StorageSpec) -> bool:
    """True for a database-server URL (workers on several hosts, heartbeats)."""
    return isinstance(spec, str) and scheme(spec) in SERVER_SCHEMES


@overload
def open_storage(spec: None, heartbeat_s: int | None = None, *, create: bool = True) -> None: ...


@overload
def open_storage(
    spec: str | Path | BaseStorage, heartbeat_s: int | None = None, *, create: bool = True
) -> BaseStorage: ...


def open_storage(
    spec: StorageSpec, heartbeat_s: int | None = None, *, create: bool = True
) -> BaseStorage | None:
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
    kw: _HeartbeatKw = {}
    cls: type[RDBStorage] = RDBStorage
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
            if kind == "sqlite":
                return _wrap_public(st, lambda fn: _sqlite_checked(fn, s))
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


def _with_reconnect(storage: _S, url: str) -> _S:
    """Make every storage call retry a lost connection with backoff for reconnect_s() seconds, then
    raise a StorageError. A call that committed just before the connection dropped may run twice
    (at worst one extra RUNNING trial, which then has no heartbeat and is failed as stale)."""
    return _wrap_public(storage, lambda fn: _retrying(fn, url))


def _wrap_public(storage: _S, wrap: Callable[[Callable[..., object]], Callable[..., object]]) -> _S:
    """Replace each public method of `storage` (and the stale-trial hook) by `wrap(method)`."""
    names = [n for n in dir(type(storage)) if not n.startswith("__")]
    for name in names:
        if name.startswith("_") and name != STALE_TRIAL_IDS_HOOK:
            continue
        fn = getattr(storage, name, None)
        if callable(fn):
            setattr(storage, name, wrap(fn))
    return storage


def _sqlite_checked(fn: Callable[_P, _R], url: str) -> Callable[_P, _R]:
    """`fn` with a corrupt SQLite file (found by any later query) reported in one line naming it."""

    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            why = _sqlite_corruption(e)
            if why is None:
                raise
            raise AutoparError(_not_sqlite_study(url, why)) from None

    return call


def _sqlite_corruption(e: BaseException) -> str | None:
    """SQLite's own words when `e` (or what caused it) says the file is not a database or is corrupt
    (Optuna wraps it in a StorageInternalError that blames "invalid data ... exceeding max length")."""
    import sqlite3

    x: BaseException | None = e
    for _ in range(8):  # bounded: a chain can loop
        if x is None:
            return None
        code = getattr(x, "sqlite_errorname", "")
        if type(x) is sqlite3.DatabaseError or code in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):
            return (str(x).strip().splitlines() or [type(x).__name__])[0]
        x = x.__cause__ or x.__context__
    return None


def _not_sqlite_study(url: str, why: str) -> str:
    path = url.split(":///", 1)[-1]
    return f"storage={mask(url)}: {path!r} is not a readable SQLite study ({why})"


def _retrying(fn: Callable[_P, _R], url: str) -> Callable[_P, _R]:
    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
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


def _beatless_trial_ids(storage: RDBStorage, study_id: int) -> list[int]:
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
    if isinstance(e, AutoparError):  # already one line naming the storage
        return e
    if kind == "sqlite" and (why := _sqlite_corruption(e)) is not None:
        return AutoparError(_not_sqlite_study(url, why))
    if any(isinstance(x, ImportError) for x in chain):
        _mod, pkg = DRIVERS.get(kind, ("", "the database driver"))
        how = f": {install_hint('postgres')}" if kind == "postgresql" else ""
        return AutoparError(f"{where}: the {kind} driver is not installed; install {pkg}{how}")
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


def _journal(path: str, create: bool = True) -> JournalStorage:
    from optuna.storages import JournalStorage

    p = _checked_file(path, path, create)
    with contextlib.suppress(OSError), open(p, "rb") as f:
        if f.read(16) == b"SQLite format 3\x00":
            raise AutoparError(f"storage={path!r}: a SQLite file, not a journal; give sqlite:///{path}")
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
            self.offsets = {0: 0}  # record number -> byte offset where it starts
            super().__init__(file_path, lock_obj=self.lock)

        def read_logs(self, log_number_from: int) -> Generator[JSONDict, None, None]:
            # Optuna's own reader skips a garbled last line and fails on it once a record follows;
            # this one checks every complete record, stops at a torn tail and remembers offsets.
            start = log_number_from if log_number_from in self.offsets else 0
            with open(self.path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                try:
                    for n, end, log in _journal_lines(f, start, self.offsets[start], size):
                        self.offsets[n] = end
                        if n > log_number_from:
                            yield log
                except BadJournalRecord as e:
                    raise AutoparError(e.message(self.shown)) from None

        def append_logs(self, logs: list[JSONDict]) -> None:
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
def _holding(lock: JournalFileSymlinkLock) -> Iterator[None]:
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


# The records of an Optuna journal file, a stored format: one JSON object a line, with "op_code" (the
# value of Optuna 5's JournalOperation, which is private; tests/search/test_store_repair.py checks these against
# the installed Optuna), "worker_id" and the fields that replaying that operation reads.
JOURNAL_FIELDS: dict[int, tuple[str, ...]] = {
    0: ("study_name", "directions"),  # CREATE_STUDY
    1: ("study_id",),  # DELETE_STUDY
    2: ("study_id", "user_attr"),  # SET_STUDY_USER_ATTR
    3: ("study_id", "system_attr"),  # SET_STUDY_SYSTEM_ATTR
    4: ("study_id", "datetime_start"),  # CREATE_TRIAL
    5: ("trial_id", "param_name", "param_value_internal", "distribution"),  # SET_TRIAL_PARAM
    6: ("trial_id", "state", "values"),  # SET_TRIAL_STATE_VALUES
    7: ("trial_id", "step", "intermediate_value"),  # SET_TRIAL_INTERMEDIATE_VALUE
    8: ("trial_id", "user_attr"),  # SET_TRIAL_USER_ATTR
    9: ("trial_id", "system_attr"),  # SET_TRIAL_SYSTEM_ATTR
    10: (),  # DISCARD_TRIALS (written by Rustuna; Optuna skips it)
}
_RUNNING, _FINISHED, _STATES = 0, (1, 2, 3), range(5)  # TrialState values


class BadJournalRecord(ValueError):
    """A complete journal line that is not a record Optuna can replay: its index and byte offset."""

    def __init__(self, index: int, offset: int, why: str):
        super().__init__(why)
        self.index, self.offset, self.why = index, offset, why

    def message(self, shown: str) -> str:
        if self.index == 0:
            return f"storage={shown!r}: not an Optuna journal file (line 1 is not a record: {self.why})"
        return (
            f"storage={shown!r}: line {self.index + 1} (byte {self.offset}) is not an Optuna journal "
            f"record ({self.why}); the {self.index} records before it are intact: "
            f"`autopar study repair {shlex.quote(shown)}` keeps them"
        )


def _journal_lines(f: IO[bytes], n: int, pos: int, size: int) -> Iterator[tuple[int, int, JSONDict]]:
    """(records read, byte offset after the record, record) for each complete line of `f` from byte `pos`
    (record `n`) up to byte `size`. A last line without its newline (torn, or still being written) ends
    the reading; a complete line that is not a record raises BadJournalRecord."""
    f.seek(pos)
    for line in f:
        if pos + len(line) > size or not line.endswith(b"\n"):
            return
        try:
            log = journal_record(line)
        except ValueError as e:
            raise BadJournalRecord(n, pos, str(e)) from None
        pos, n = pos + len(line), n + 1
        yield n, pos, log


def journal_record(line: bytes) -> JSONDict:
    """One journal line as the record Optuna replays; ValueError saying why it is not one."""
    try:
        log = json.loads(line)
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON: {e.msg.lower()} at column {e.colno}") from None
    if not isinstance(log, dict):
        raise ValueError(f"a JSON {type(log).__name__}, not an object")
    op = log.get("op_code")
    if type(op) is not int or op not in JOURNAL_FIELDS:
        raise ValueError(f"unknown op_code {json.dumps(op)[:40]}")
    state = log.get("state")
    needed = [*JOURNAL_FIELDS[op], "worker_id"]
    if op == 6 and state == _RUNNING:
        needed.append("datetime_start")
    elif op == 6 and state in _FINISHED:
        needed.append("datetime_complete")
    missing = [k for k in needed if k not in log]
    if missing:
        raise ValueError(f"op_code {op} without {', '.join(missing)}")
    bad = [k for k, check in _FIELD_CHECKS.items() if k in log and not check(log[k])]
    if op == 4 and not bad and not set(log.get("params", {})) <= set(log.get("distributions", {})):
        bad.append("params")
    if bad:
        raise ValueError(f"op_code {op} with a malformed {', '.join(bad)}")
    return log


def _is_int(v: JSONValue) -> bool:
    return type(v) is int


def _is_number(v: JSONValue) -> bool:
    return type(v) in (int, float)


def _is_time(v: JSONValue) -> bool:
    if v is None:
        return True
    try:
        datetime.fromisoformat(v)
    except (TypeError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _is_distribution(v: JSONValue) -> bool:
    from optuna.distributions import json_to_distribution

    try:
        json_to_distribution(v)
    except Exception:  # noqa: BLE001 - whatever Optuna's parser refuses
        return False
    return True


def _is_distributions(v: JSONValue) -> bool:
    return isinstance(v, dict) and all(isinstance(d, str) and _is_distribution(d) for d in v.values())


_FIELD_CHECKS: dict[str, Callable[[JSONValue], bool]] = {
    "worker_id": lambda v: isinstance(v, str),
    "study_name": lambda v: isinstance(v, str),
    "study_id": _is_int,
    "trial_id": _is_int,
    "step": _is_int,
    "directions": lambda v: isinstance(v, list) and bool(v) and all(_is_int(d) and 0 <= d <= 2 for d in v),
    "user_attr": lambda v: isinstance(v, dict) and len(v) == 1,
    "system_attr": lambda v: isinstance(v, dict) and len(v) == 1,
    "user_attrs": lambda v: isinstance(v, dict),
    "system_attrs": lambda v: isinstance(v, dict),
    "intermediate_values": lambda v: isinstance(v, dict) and all(re.fullmatch(r"-?\d+", k) for k in v),
    "datetime_start": _is_time,
    "datetime_complete": _is_time,
    "state": lambda v: _is_int(v) and v in _STATES,
    "value": lambda v: v is None or _is_number(v),
    "values": lambda v: v is None or (isinstance(v, list) and all(_is_number(x) for x in v)),
    "param_name": lambda v: isinstance(v, str),
    "param_value_internal": _is_number,
    "distribution": lambda v: isinstance(v, str) and _is_distribution(v),
    "distributions": _is_distributions,
    "params": lambda v: isinstance(v, dict) and all(_is_number(x) for x in v.values()),
}


@dataclass(frozen=True)
class JournalRepair:
    """What `repair_journal` did: records kept and lines dropped, where it wrote, the backup."""

    kept: int
    dropped: int
    out: Path | None  # None: nothing to repair, nothing written
    backup: Path | None
    first_bad: BadJournalRecord | None


def repair_journal(path: str, out: str | None = None) -> JournalRepair:
    """Keep the valid prefix of journal `path` (every record before the first line Optuna could not
    replay, and no torn tail): written atomically to `out`, or over `path` with the original kept as
    `path`.bak (.bak.1, ... when that exists). Holds the journal's lock, so no worker appends meanwhile."""
    from optuna.storages.journal import JournalFileSymlinkLock

    p = _checked_file(path, path, create=False)
    with _holding(JournalFileSymlinkLock(str(p))):
        data = p.read_bytes()
        kept, end, bad = _valid_prefix(data)
        rest = data[end:]
        dropped = rest.count(b"\n") + (0 if rest.endswith(b"\n") or not rest else 1)
        if kept == 0 and dropped:
            why = f": {bad.why}" if bad else ""
            raise AutoparError(
                f"{path!r}: not an Optuna journal (line 1 is not a record{why}); nothing written"
            )
        target = expand_user(out) if out else p
        if not dropped and target == p:
            return JournalRepair(kept, 0, None, None, None)
        backup = None
        if target == p:
            backup = _free_name(p.with_name(p.name + ".bak"))
            write_atomic(backup, data)
        write_atomic(target, data[:end])
    return JournalRepair(kept, dropped, target, backup, bad)


def _valid_prefix(data: bytes) -> tuple[int, int, BadJournalRecord | None]:
    """(records, byte length, first bad line or None) of the valid prefix of a journal's bytes."""
    import io

    kept, end = 0, 0
    try:
        for n, after, _log in _journal_lines(io.BytesIO(data), 0, 0, len(data)):
            kept, end = n, after
    except BadJournalRecord as e:
        return kept, end, e
    return kept, end, None


def _free_name(p: Path) -> Path:
    """`p`, or `p`.1, `p`.2, ... : the first that does not exist."""
    n, q = 0, p
    while q.exists() or q.is_symlink():
        n += 1
        q = p.with_name(f"{p.name}.{n}")
    return q
