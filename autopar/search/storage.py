"""Where a study lives: in memory (default), an Optuna journal file, SQLite, or a database server.

`--storage` takes a journal file path (the default for a file: fast, no server), an SQLAlchemy URL
``sqlite:///study.db``, or a server URL ``postgresql://user:password@host:5432/db`` (also
``mysql://...``). Server storages get Optuna heartbeats, so a worker killed mid-trial leaves a trial
that `fail_stale_trials` turns FAILED after the grace period (optuna.storages.RDBStorage,
heartbeat_interval / grace_period). Every connection problem (server down, wrong password, missing
driver, bad URL) becomes one AutoparError line naming the storage with its password masked.
"""

from __future__ import annotations

import re
import time
import warnings
from pathlib import Path
from typing import Any

from autopar.errors import AutoparError

HEARTBEAT_S = 10  # default seconds between a server worker's heartbeats (RDBStorage heartbeat_interval)
GRACE_FACTOR = 3  # a RUNNING trial silent for GRACE_FACTOR x heartbeat is failed (grace_period)
CREATE_RETRIES = 5  # attempts when several workers create the tables of an empty database at once
SERVER_SCHEMES = ("postgresql", "postgres", "mysql", "mariadb")
DRIVERS = {  # URL scheme -> (module SQLAlchemy imports by default, pip package that provides it)
    "postgresql": ("psycopg", "psycopg[binary] (pip install 'autopar[postgres]')"),
    "mysql": ("MySQLdb", "mysqlclient"),
}


def mask(url: str) -> str:
    """The URL with its password replaced by ***."""
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def scheme(spec: str) -> str:
    """'postgresql', 'sqlite', ... for a URL; 'journal' for a file path."""
    if "://" not in spec:
        return "journal"
    head = spec.split("://", 1)[0].split("+", 1)[0].lower()
    return "postgresql" if head == "postgres" else head


def is_server(spec: Any) -> bool:
    """True for a database-server URL (workers on several hosts, heartbeats)."""
    return isinstance(spec, str) and scheme(spec) in SERVER_SCHEMES


def open_storage(spec: Any, heartbeat_s: int | None = None) -> Any:
    """An Optuna storage for `spec` (None -> None = in memory; objects pass through)."""
    if spec is None or not isinstance(spec, str | Path):
        return spec
    s = str(spec)
    kind = scheme(s)
    if kind == "journal":
        return _journal(s)
    from optuna.storages import RDBStorage, get_storage

    if s.startswith("postgres://"):
        s = "postgresql" + s[len("postgres") :]
    if s.startswith("postgresql://"):
        s = _pg_driver(s)
    kw: dict[str, Any] = {}
    if kind in SERVER_SCHEMES:
        hb = heartbeat_s or HEARTBEAT_S
        kw = {"heartbeat_interval": hb, "grace_period": GRACE_FACTOR * hb}
    elif kind == "sqlite":
        _check_sqlite_folder(s)
    for attempt in range(CREATE_RETRIES + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # heartbeat_interval is flagged experimental
                return get_storage(RDBStorage(s, **kw))
        except Exception as e:  # noqa: BLE001 - every failure to reach the storage becomes one line
            # Workers starting together on an empty database race to create Optuna's tables; the
            # losers see "already exists" / a unique violation and simply retry.
            text = str(e).lower()
            racing = "already exists" in text or "duplicate key" in text or "unique constraint" in text
            if not racing or attempt == CREATE_RETRIES:
                raise storage_error(s, e) from e
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


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
    return AutoparError(f"{where}: cannot open the study storage: {mask(text)}")


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


def _journal(path: str) -> Any:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    try:
        p = Path(path).expanduser()
        folder = p.resolve().parent
        ok, is_dir = folder.is_dir(), p.is_dir()
    except (OSError, ValueError, RuntimeError) as e:  # e.g. an embedded NUL byte, a symlink loop
        raise AutoparError(f"storage={path!r}: not a usable file path ({e})") from None
    if not ok:
        raise AutoparError(f"storage={path!r}: folder {folder} does not exist")
    if is_dir:
        raise AutoparError(f"storage={path!r}: is a folder; give a journal file path")
    try:
        return JournalStorage(JournalFileBackend(str(p)))
    except Exception as e:  # noqa: BLE001 - unreadable or corrupt journal
        raise AutoparError(f"storage={path!r}: not an Optuna journal file ({type(e).__name__}: {e})") from e


def _check_sqlite_folder(url: str) -> None:
    path = url.split(":///", 1)[-1] if ":///" in url else ""
    if not path or path == ":memory:":
        return
    try:
        folder = Path(path).expanduser().resolve().parent
        ok = folder.is_dir()
    except (OSError, ValueError, RuntimeError) as e:
        raise AutoparError(f"storage={url!r}: not a usable file path ({e})") from None
    if not ok:
        raise AutoparError(f"storage={url!r}: folder {folder} does not exist")
