"""The run store: an embedded SQLite database of run records, deduplicated by fingerprint.

One row per record: fingerprint (UNIQUE), id, source, file, ingested_at and the record as JSON.
Every `add` is one transaction: either all of its new records are written or none is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autopar.errors import DataError
from autopar.files import autopar_home, ensure_dir, expand_user

SCHEMA_VERSION = "1"
_DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    pk INTEGER PRIMARY KEY AUTOINCREMENT,
    fingerprint TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    source TEXT NOT NULL,
    file TEXT NOT NULL,
    model TEXT,
    gpu TEXT,
    num_gpus INTEGER,
    ingested_at TEXT NOT NULL,
    record TEXT NOT NULL
);
"""
# The columns autopar reads and writes, per table: a file whose tables lack them is not a run store.
_COLUMNS = {
    "runs": (
        "pk",
        "fingerprint",
        "run_id",
        "source",
        "file",
        "model",
        "gpu",
        "num_gpus",
        "ingested_at",
        "record",
    ),
    "meta": ("key", "value"),
}


def default_store_path() -> Path:
    """Where runs are stored unless --store says otherwise: <autopar home>/runs.db."""
    return autopar_home() / "runs.db"


@dataclass(frozen=True)
class StoredRun:
    """One stored record with its store metadata."""

    fingerprint: str
    source: str
    file: str
    ingested_at: str
    record: dict[str, Any]


class RunStore:
    """A SQLite file of run records; `add` is atomic and idempotent (fingerprint is UNIQUE)."""

    def __init__(self, path: str | Path | None = None):
        self.path = expand_user(path) if path else default_store_path()

    @contextmanager
    def _connect(self, *, create: bool) -> Iterator[sqlite3.Connection]:
        if not self.path.exists() and not create:
            raise DataError(
                f"no run store at '{self.path}': ingest runs first "
                "(autopar calibrate ingest FILE) or pass --store PATH"
            )
        if create:
            ensure_dir(self.path.parent)
        try:  # a directory, or a folder without write access, fails here
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except sqlite3.Error as e:
            raise DataError(f"cannot open run store '{self.path}': {e}") from None
        try:
            try:
                self._check_schema(conn)
                conn.executescript(_DDL)
                row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            except sqlite3.DatabaseError as e:
                raise DataError(f"'{self.path}' is not an autopar run store: {e}") from e
            if row is None:
                conn.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            elif row[0] != SCHEMA_VERSION:
                raise DataError(
                    f"run store '{self.path}' has schema version {row[0]}; this autopar "
                    f"reads version {SCHEMA_VERSION}"
                )
            try:
                yield conn
            except sqlite3.DatabaseError as e:  # corruption found by a later query: one line too
                if type(e) is not sqlite3.DatabaseError:  # locked, constraint, ...: not the file's fault
                    raise
                raise DataError(f"'{self.path}' is not a readable autopar run store: {e}") from e
        finally:
            conn.close()

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        """Refuse (before creating anything in it) a SQLite file whose tables are not a run store's: one
        with other tables and no `runs`, or whose `runs` or `meta` lacks the columns autopar writes."""
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        user = [t for t in tables if not t.startswith("sqlite_")]
        if user and "runs" not in user:
            shown = ", ".join(sorted(user)[:5]) + (", ..." if len(user) > 5 else "")
            raise DataError(
                f"'{self.path}' is not an autopar run store: it has tables {shown} and no runs table"
            )
        for table, columns in _COLUMNS.items():
            if table not in user:
                continue
            have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            missing = [c for c in columns if c not in have]
            if missing:
                raise DataError(
                    f"'{self.path}' is not an autopar run store: its {table} table has no "
                    f"{', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''} column"
                    f"{'s' if len(missing) > 1 else ''}"
                )

    def _insert(self, conn: sqlite3.Connection, fp: str, record: dict[str, Any], file: str, now: str) -> bool:
        """Insert one record unless its fingerprint is stored already; True if it was new."""
        cur = conn.execute(
            "INSERT OR IGNORE INTO runs (fingerprint, run_id, source, file, model, gpu, num_gpus, "
            "ingested_at, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                fp,
                str(record.get("id") or ""),
                str(record.get("source") or ""),
                file,
                record.get("model"),
                record.get("gpu"),
                record.get("num_gpus"),
                now,
                json.dumps(record, sort_keys=False, default=str),
            ),
        )
        return cur.rowcount == 1

    def add(self, items: Sequence[tuple[str, dict[str, Any], str]]) -> int:
        """Write (fingerprint, record, file) items in one transaction; return how many were new."""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        with self._connect(create=True) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                added = sum(self._insert(conn, fp, rec, file, now) for fp, rec, file in items)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return added

    def runs(self) -> list[StoredRun]:
        """Every stored record in insertion order."""
        if not self.path.exists():
            return []
        with self._connect(create=False) as conn:
            rows = conn.execute(
                "SELECT fingerprint, source, file, ingested_at, record FROM runs ORDER BY pk"
            ).fetchall()
        return [StoredRun(fp, src, f, t, json.loads(rec)) for fp, src, f, t, rec in rows]

    def records(self) -> list[dict[str, Any]]:
        """Every stored record as a plain dict (schema columns + extras)."""
        return [r.record for r in self.runs()]

    def count(self) -> int:
        """Number of stored records (0 for a store that does not exist yet)."""
        if not self.path.exists():
            return 0
        with self._connect(create=False) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0])

    def fingerprints(self) -> set[str]:
        """Fingerprints of all stored records."""
        return {r.fingerprint for r in self.runs()}

    def remove(self, keys: Sequence[str]) -> list[str]:
        """Delete the records whose run id or fingerprint is one of `keys`, in one transaction; the run ids
        removed. A key that names no stored record is a DataError naming it and nothing is removed."""
        with self._connect(create=False) as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                found: list[tuple[int, str]] = []
                for key in keys:
                    rows = conn.execute(
                        "SELECT pk, run_id FROM runs WHERE run_id = ? OR fingerprint = ?", (key, key)
                    ).fetchall()
                    if not rows:
                        raise DataError(
                            f"no stored run has id or fingerprint {key!r} (autopar calibrate list)"
                        )
                    found += [(int(pk), str(rid)) for pk, rid in rows]
                conn.executemany("DELETE FROM runs WHERE pk = ?", [(pk,) for pk, _ in found])
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return list(dict.fromkeys(rid for _, rid in found))
