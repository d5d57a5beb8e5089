"""The run store: run records deduplicated by fingerprint, in an embedded SQLite file (the default) or, for
a team, on a PostgreSQL server (`--store postgresql://user:password@host:5432/db`).

One row per record: fingerprint (UNIQUE), id, source, file, ingested_at and the record as JSON (the tables
and statements: store_sql.py; the backends: store_sqlite.py, store_postgres.py). Every `add` is one
transaction: either all of its new records are written or none is, and a record stored already (by this or
a concurrent writer) is skipped. `remove` deletes all the runs it names or none.

Where the store is: `--store` (a file path or a postgresql:// URL), else $AUTOPAR_STORE (the same), else
<autopar home>/runs.db. Any other URL is refused in one line naming the option and the URL, its password
masked; so is everything shown of a server store (`location`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from autopar.calibration.store.sql import COUNT, DELETE, FIND, INSERT, SELECT_RUNS, insert_values
from autopar.calibration.store.sqlite import SqliteDb
from autopar.errors import DataError
from autopar.files import autopar_home, expand_user
from autopar.text import mask

STORE_ENV = "AUTOPAR_STORE"  # the store when --store is not given (as AUTOPAR_HOME is autopar's folder)
POSTGRES_SCHEMES = ("postgresql", "postgres")  # libpq reads both; `+driver` (SQLAlchemy's form) is dropped
_URL = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")


def default_store_path() -> Path:
    """Where runs are stored unless --store or $AUTOPAR_STORE says otherwise: <autopar home>/runs.db."""
    return autopar_home() / "runs.db"


def store_location(spec: str | Path | None = None) -> str | Path:
    """The store `spec` (a --store value) names: a postgresql:// URL (str) or a SQLite file (Path). Without
    one, $AUTOPAR_STORE, else the default file. A URL of another kind is a DataError naming where it came
    from (the option or the variable) and the URL with its password masked."""
    field = "store"
    if spec is None or str(spec) == "":
        spec, field = os.environ.get(STORE_ENV, ""), STORE_ENV
        if not spec:
            return default_store_path()
    if isinstance(spec, Path) or (m := _URL.match(spec)) is None:
        return expand_user(spec)
    if m[1].lower().split("+", 1)[0] in POSTGRES_SCHEMES:
        return "postgresql://" + spec[m.end() :]
    raise DataError(
        f"{field}={mask(spec)}: not a run store: give a file path (a SQLite store) or "
        "postgresql://user:password@host:5432/db (a shared one)"
    )


@dataclass(frozen=True)
class StoredRun:
    """One stored record with its store metadata."""

    fingerprint: str
    source: str
    file: str
    ingested_at: str
    record: dict[str, Any]


class _Backend(Protocol):
    """A database that holds a run store (store_sqlite.SqliteDb, store_postgres.PostgresDb)."""

    location: str

    def exists(self) -> bool: ...

    # a connection (`execute(sql, params)` with `?` placeholders), None for a store not made yet unless create
    def connect(self, *, create: bool) -> AbstractContextManager[Any]: ...

    def transaction(self, conn: Any) -> AbstractContextManager[None]: ...


class RunStore:
    """Run records in a SQLite file or a PostgreSQL database; `add` is atomic and idempotent (fingerprint
    is UNIQUE), also when several processes write at once."""

    def __init__(self, spec: str | Path | None = None):
        where = store_location(spec)
        self._db: _Backend
        if isinstance(where, Path):
            self.path: Path | None = where
            self._db = SqliteDb(where)
        else:
            from autopar.calibration.store.postgres import PostgresDb

            self.path = None
            self._db = PostgresDb(where)

    @property
    def location(self) -> str:
        """Where the store is, to show: its file, or its URL with the password masked."""
        return self._db.location

    def exists(self) -> bool:
        """Whether the store has been made (the file exists; the database has its tables)."""
        return self._db.exists()

    def add(self, items: Sequence[tuple[str, dict[str, Any], str]]) -> int:
        """Write (fingerprint, record, file) items in one transaction; return how many were new."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._db.connect(create=True) as conn, self._db.transaction(conn):
            return sum(self._insert(conn, fp, rec, file, now) for fp, rec, file in items)

    def _insert(self, conn: Any, fp: str, record: dict[str, Any], file: str, now: str) -> bool:
        """Insert one record unless its fingerprint is stored already; True if it was new."""
        return bool(conn.execute(INSERT, insert_values(fp, record, file, now)).rowcount == 1)

    def runs(self) -> list[StoredRun]:
        """Every stored record in insertion order ([] for a store not made yet)."""
        with self._db.connect(create=False) as conn:
            rows = [] if conn is None else conn.execute(SELECT_RUNS).fetchall()
        return [StoredRun(fp, src, f, t, json.loads(rec)) for fp, src, f, t, rec in rows]

    def records(self) -> list[dict[str, Any]]:
        """Every stored record as a plain dict (schema columns + extras)."""
        return [r.record for r in self.runs()]

    def count(self) -> int:
        """Number of stored records (0 for a store not made yet)."""
        with self._db.connect(create=False) as conn:
            return 0 if conn is None else int(conn.execute(COUNT).fetchone()[0])

    def fingerprints(self) -> set[str]:
        """Fingerprints of all stored records."""
        return {r.fingerprint for r in self.runs()}

    def remove(self, keys: Sequence[str]) -> list[str]:
        """Delete the records whose run id or fingerprint is one of `keys`, in one transaction; the run ids
        removed. A key that names no stored record is a DataError naming it and nothing is removed."""
        with self._db.connect(create=False) as conn:
            if conn is None:
                raise DataError(
                    f"no run store at '{self.location}': ingest runs first "
                    "(autopar calibrate ingest FILE) or pass --store PATH"
                )
            with self._db.transaction(conn):
                found: list[tuple[int, str]] = []
                for key in keys:
                    rows = conn.execute(FIND, (key, key)).fetchall()
                    if not rows:
                        raise DataError(
                            f"no stored run has id or fingerprint {key!r} (autopar calibrate list)"
                        )
                    found += [(int(pk), str(rid)) for pk, rid in rows]
                for pk in dict.fromkeys(pk for pk, _ in found):
                    conn.execute(DELETE, (pk,))
        return list(dict.fromkeys(rid for _, rid in found))
