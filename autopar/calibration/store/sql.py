"""The run store's tables and statements, shared by its SQLite (store_sqlite.py) and PostgreSQL
(store_postgres.py) backends. Statements use `?` placeholders; the PostgreSQL backend passes them as `%s`.
Only the primary key's declaration differs between the two (SQLite's rowid, PostgreSQL's identity column).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autopar.errors import DataError

SCHEMA_VERSION = "1"
_META = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
_RUNS = """CREATE TABLE IF NOT EXISTS runs (
    pk {pk},
    fingerprint TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL,
    source TEXT NOT NULL,
    file TEXT NOT NULL,
    model TEXT,
    gpu TEXT,
    num_gpus INTEGER,
    ingested_at TEXT NOT NULL,
    record TEXT NOT NULL
)"""
# The columns autopar reads and writes, per table: a database whose tables lack them is not a run store.
COLUMNS = {
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
# ON CONFLICT ... DO NOTHING: a record stored already (by this or a concurrent writer) is skipped, and its
# row count is 0 (SQLite 3.24+ and PostgreSQL 9.5+ read the same statement).
INSERT = (
    "INSERT INTO runs (fingerprint, run_id, source, file, model, gpu, num_gpus, ingested_at, record) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO NOTHING"
)
SELECT_RUNS = "SELECT fingerprint, source, file, ingested_at, record FROM runs ORDER BY pk"
COUNT = "SELECT COUNT(*) FROM runs"
FIND = "SELECT pk, run_id FROM runs WHERE run_id = ? OR fingerprint = ?"
DELETE = "DELETE FROM runs WHERE pk = ?"
VERSION = "SELECT value FROM meta WHERE key = 'schema_version'"
SET_VERSION = "INSERT INTO meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) DO NOTHING"
_INT_RANGE = range(-(2**31), 2**31)  # an INTEGER column on both


def ddl(pk: str) -> list[str]:
    """CREATE statements of the store's tables, `pk` the primary key's declaration."""
    return [_META, _RUNS.format(pk=pk)]


def insert_values(fp: str, record: dict[str, Any], file: str, now: str) -> tuple[Any, ...]:
    """The INSERT's parameters for one record; the record itself is stored whole as JSON, the other columns
    are copies for queries by hand (text, or NULL; num_gpus an integer or NULL)."""
    import json

    def text(value: Any) -> str | None:
        return None if value is None else str(value)

    n = record.get("num_gpus")
    num_gpus = n if type(n) is int and n in _INT_RANGE else None
    return (
        fp,
        str(record.get("id") or ""),
        str(record.get("source") or ""),
        file,
        text(record.get("model")),
        text(record.get("gpu")),
        num_gpus,
        now,
        json.dumps(record, sort_keys=False, default=str),
    )


def check_tables(where: str, tables: Mapping[str, set[str]], others_ok: frozenset[str] = frozenset()) -> None:
    """Refuse a database whose tables (name -> its columns) are not a run store's: one with other tables
    (beyond `others_ok`) and no `runs`, or whose `runs` or `meta` lacks the columns autopar writes."""
    user = sorted(t for t in tables if t not in others_ok)
    if user and "runs" not in tables:
        shown = ", ".join(user[:5]) + (", ..." if len(user) > 5 else "")
        raise DataError(f"'{where}' is not an autopar run store: it has tables {shown} and no runs table")
    for table, columns in COLUMNS.items():
        if table not in tables:
            continue
        missing = [c for c in columns if c not in tables[table]]
        if missing:
            raise DataError(
                f"'{where}' is not an autopar run store: its {table} table has no "
                f"{', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''} column"
                f"{'s' if len(missing) > 1 else ''}"
            )


def check_version(where: str, version: str) -> None:
    """Refuse a store written with another schema version."""
    if version != SCHEMA_VERSION:
        raise DataError(
            f"run store '{where}' has schema version {version}; this autopar reads version {SCHEMA_VERSION}"
        )
