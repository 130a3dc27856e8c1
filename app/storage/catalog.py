"""SQLite catalog: the embedded source of truth for collections, items, segments, embeddings and codes.

WAL mode, ``synchronous=FULL``: a write is acknowledged only after its transaction commits, so
it survives a killed process (and a power cut). Every write transaction takes a new sequence
number from ``writes``; segments carry the sequence that added them and ``tombstones`` record the
sequence that removed them, which lets an index snapshot taken at sequence S be brought up to
date by replaying rows with ``seq > S``. Segment ids come from AUTOINCREMENT and are never
reused, so they are stable FAISS ids. A write that fails because the disk is full or read-only
is rolled back and raised as its domain error (app/storage/disk_errors.py). The SQL itself lives in :mod:`app.storage.sql_catalog`,
shared with the PostgreSQL catalog of cluster mode.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from app.storage.disk_errors import disk_errors
from app.storage.records import Collection, NewItem, WriteResult
from app.storage.sql_catalog import SqlCatalog

__all__ = ["Catalog", "Collection", "NewItem", "WriteResult"]


class Catalog(SqlCatalog):
    """Thread-safe access to the SQLite catalog (one connection, one lock)."""

    dialect = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        super().__init__()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _execute(self, sql: str, params: tuple | list = ()) -> Any:
        with disk_errors(self.path.parent):
            return self._db.execute(sql, params)

    def _executemany(self, sql: str, rows: list[tuple]) -> None:
        with disk_errors(self.path.parent):
            self._db.executemany(sql, rows)

    def _transaction(self) -> "_Tx":
        return _Tx(self._db, self.path.parent)

    def _insert_id(self, sql: str, params: tuple, id_column: str) -> int:
        with disk_errors(self.path.parent):
            return int(self._db.execute(sql, params).lastrowid)

    def _duplicate_errors(self) -> tuple[type[BaseException], ...]:
        return (sqlite3.IntegrityError,)


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception; one writer at a time orders sequences."""

    def __init__(self, db: sqlite3.Connection, directory: Path) -> None:
        self.db = db
        self.directory = directory

    def __enter__(self) -> None:
        with disk_errors(self.directory):
            self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if exc_type is None:
            try:
                with disk_errors(self.directory):
                    self.db.execute("COMMIT")
                return
            except BaseException:
                self._rollback()  # a COMMIT that failed (disk full) leaves the transaction open
                raise
        self._rollback()

    def _rollback(self) -> None:
        # SQLITE_FULL and some I/O errors roll the transaction back by themselves; a second
        # ROLLBACK would raise "no transaction is active" over the error that matters
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
