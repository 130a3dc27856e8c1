"""Injected disk failures at the real write paths: the originals' fsync, the catalog's SQLite writes."""

from __future__ import annotations

import os
import sqlite3
import types


class FailingOs(types.SimpleNamespace):
    """The os module as media_store sees it, with fsync failing as a full disk makes it fail."""

    def __init__(self, err: int) -> None:
        super().__init__(**vars(os))

        def fsync(fd: int) -> None:
            raise OSError(err, os.strerror(err))

        self.fsync = fsync


class FullDb:
    """The catalog's SQLite connection, refusing every write the way SQLITE_FULL does."""

    def __init__(self, db: sqlite3.Connection, message: str = "database or disk is full") -> None:
        self._real = db
        self._message = message

    def execute(self, sql: str, *args):
        if sql.lstrip().upper().startswith(("BEGIN", "INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError(self._message)
        return self._real.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._real, name)
