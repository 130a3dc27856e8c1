"""SQLite catalog: the embedded source of truth for collections, items, segments, embeddings and codes.

WAL mode, ``synchronous=FULL``: a write is acknowledged only after its transaction commits, so
it survives a killed process (and a power cut). Every write transaction takes a new sequence
number from ``writes``; segments carry the sequence that added them and ``tombstones`` record the
sequence that removed them, which lets an index snapshot taken at sequence S be brought up to
date by replaying rows with ``seq > S``. Segment ids come from AUTOINCREMENT and are never
reused, so they are stable FAISS ids. A write that fails because the disk is full or read-only
is rolled back and raised as its domain error (app/storage/disk_errors.py). The SQL itself lives in :mod:`app.storage.sql_catalog`,
shared with the PostgreSQL catalog of cluster mode.

Writes and most reads share one connection under one lock. A search's lookups (segment -> item, the hits'
rows, an audio hit's windows) read on a connection of the calling thread (:class:`ThreadReaders`): in WAL
mode readers run beside each other and beside the writer, each seeing the last committed state.
Why (issue 35): at 16 concurrent text queries a quarter of the search threads' time was spent waiting
for the one lock, while the machine still had a third of its CPU idle.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any, Callable

from app.storage.disk_errors import disk_errors
from app.storage.records import Collection, NewItem, WriteResult
from app.storage.sql_catalog import SqlCatalog

__all__ = ["Catalog", "Collection", "NewItem", "WriteResult"]


class Catalog(SqlCatalog):
    """Thread-safe access to the SQLite catalog (one connection and lock; the query path's reads per thread)."""

    dialect = "sqlite"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._connect()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._readers = ThreadReaders(self._connect_reader)
        super().__init__()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.row_factory = sqlite3.Row
        return db

    def _connect_reader(self) -> sqlite3.Connection:
        db = self._connect()
        db.execute("PRAGMA query_only=ON")  # a reader that tried to write would fail, not race the writer
        return db

    def close(self) -> None:
        with self._lock:
            self._readers.close()
            self._db.close()

    def _read_rows(self, sql: str, params: tuple | list = ()) -> list[Any]:
        with disk_errors(self.path.parent):
            return self._readers.get().execute(sql, params).fetchall()

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


class ThreadReaders:
    """One connection per thread, opened by ``connect`` on the thread's first read and kept for the next.

    A thread's connection is only ever used by that thread. When a thread has ended, its connection is closed
    the next time a connection is opened (a thread id the system reuses gets a fresh one); :meth:`close`
    closes them all, after which reads fail as they would on any closed connection.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection]) -> None:
        self._connect = connect
        self._local = threading.local()
        self._lock = threading.Lock()
        self._by_thread: dict[int, sqlite3.Connection] = {}
        self._closed = False

    def get(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is not None:
            return db
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed database.")
            alive = {thread.ident for thread in threading.enumerate()}
            me = threading.get_ident()
            for ident in [i for i in self._by_thread if i not in alive or i == me]:
                self._by_thread.pop(ident).close()
            db = self._by_thread[me] = self._connect()
        self._local.db = db
        return db

    def open_count(self) -> int:
        with self._lock:
            return len(self._by_thread)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for db in self._by_thread.values():
                db.close()
            self._by_thread.clear()
