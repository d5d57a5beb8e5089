"""The run store's embedded backend: one SQLite file (the default, $AUTOPAR_HOME/runs.db).

A writer holds SQLite's write lock for its whole transaction (BEGIN IMMEDIATE), so concurrent processes on
one machine take turns; a file that is not a run store (foreign tables, corruption) is one line naming it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from autopar.calibration.store.sql import (
    COLUMNS,
    SCHEMA_VERSION,
    SET_VERSION,
    VERSION,
    check_tables,
    check_version,
    ddl,
)
from autopar.errors import DataError
from autopar.files import ensure_dir

PK = "INTEGER PRIMARY KEY AUTOINCREMENT"


class SqliteDb:
    """Connections to one SQLite run-store file."""

    def __init__(self, path: Path):
        self.path = path
        self.location = str(path)

    def exists(self) -> bool:
        return self.path.exists()

    @contextmanager
    def connect(self, *, create: bool) -> Iterator[sqlite3.Connection | None]:
        """A connection to the store, its tables made; None (without creating the file) when the file
        does not exist and `create` is False."""
        if not create and not self.path.exists():
            yield None
            return
        if create:
            ensure_dir(self.path.parent)
        try:  # a directory, or a folder without write access, fails here
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        except sqlite3.Error as e:
            raise DataError(f"cannot open run store '{self.path}': {e}") from None
        try:
            try:
                self._init(conn)
            except sqlite3.DatabaseError as e:
                raise DataError(f"'{self.path}' is not an autopar run store: {e}") from e
            try:
                yield conn
            except sqlite3.DatabaseError as e:  # corruption found by a later query: one line too
                if type(e) is not sqlite3.DatabaseError:  # locked, constraint, ...: not the file's fault
                    raise
                raise DataError(f"'{self.path}' is not a readable autopar run store: {e}") from e
        finally:
            conn.close()

    def _init(self, conn: sqlite3.Connection) -> None:
        """Check the file's tables (before creating anything in it), then make the store's tables."""
        check_tables(self.location, self._tables(conn))
        for statement in ddl(PK):
            conn.execute(statement)
        row = conn.execute(VERSION).fetchone()
        if row is None:
            conn.execute(SET_VERSION, (SCHEMA_VERSION,))
        else:
            check_version(self.location, row[0])

    @staticmethod
    def _tables(conn: sqlite3.Connection) -> dict[str, set[str]]:
        """The file's own tables (not SQLite's internal ones); the columns of those a run store has."""
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {
            t: {r[1] for r in conn.execute(f"PRAGMA table_info({t})")} if t in COLUMNS else set()
            for t in names
            if not t.startswith("sqlite_")
        }

    @contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[None]:
        """One write transaction, holding the file's write lock from its start."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
