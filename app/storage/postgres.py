"""PostgreSQL catalog (psycopg 3): the source of truth of cluster mode, shared by every API process.

Same SQL and semantics as the SQLite catalog (:mod:`app.storage.sql_catalog`). What differs:

* durability: a commit returns after the WAL is flushed (PostgreSQL's default
  ``synchronous_commit=on``), so an acknowledged write survives the API process, and PostgreSQL;
* order: writers of one collection take a row lock on its ``collections`` row before drawing a
  sequence number and hold it to commit, so sequence order is commit order per collection and
  a reader that sees ``last_seq == S`` can replay everything up to S exactly (see sql_catalog);
* migrations run under a transaction-scoped advisory lock, so processes starting together
  migrate once;
* a full disk (SQLSTATE 53100) or a read-only server (25006) rolls the write back and raises
  507 / 503 domain errors, as the SQLite catalog does for its disk (app/storage/disk_errors.py);
* segment rows go in with one COPY after drawing their ids from the column's sequence (a
  10-minute recording is 1200 rows, not 1200 round trips);
* PostgreSQL unreachable (restarting, shut down, a dropped connection) is a 503 with Retry-After
  (:class:`CatalogUnavailable`), never a 500, and the next call reconnects: a connection found
  dead at the start of a statement or transaction (the server restarted while it sat idle) is
  replaced and the statement retried once, so the first request after a restart succeeds. A
  failure mid-transaction is not retried: that write was not acknowledged (re-sending it is safe,
  ingest is an upsert). PostgreSQL's crash recovery keeps every committed transaction (with
  ``synchronous_commit`` on), so no acknowledged write is lost by a fast or an immediate shutdown
  (tests/cluster/test_pg_restart.py).
"""

from __future__ import annotations

import threading
from contextlib import ExitStack, contextmanager
from typing import Any, Iterator

import psycopg
from psycopg import errors as pg_errors

from app.errors import InsufficientStorage, StorageReadOnly, Unhealthy
from app.storage.sql_catalog import SqlCatalog
from app.storage.text_rules import refuse_nul

MIGRATION_LOCK = 0x52454341  # "RECA": the advisory lock id migrations take
PG_FULL = ("the PostgreSQL catalog has no space left: nothing of this write was stored; "
           "free space on its server and retry, no restart needed")
RETRY_AFTER_S = 2  # a restart of PostgreSQL takes a second or two; crash recovery of a busy one longer
CONNECT_TIMEOUT_S = 5  # a server that accepts no connection in this long counts as unreachable
PG_READ_ONLY = ("the PostgreSQL catalog accepts no writes (a read-only standby, or default_transaction_read_only): "
                "nothing of this write was stored; search still works; point RECALL_CATALOG_URL at the primary")


class CatalogUnavailable(Unhealthy):
    """The PostgreSQL catalog cannot be reached: 503 with Retry-After; the catalog reconnects by itself."""

    code = "catalog_unavailable"

    def __init__(self, cause: BaseException) -> None:
        reason = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause).__name__
        super().__init__(
            f"the PostgreSQL catalog cannot be reached ({reason}); a write that got this answer was not acknowledged "
            f"(re-sending it is safe); the service reconnects by itself: retry in {RETRY_AFTER_S} s",
            details={"reason": "catalog_unreachable", "retry_after_s": RETRY_AFTER_S})
        self.headers = {"Retry-After": str(RETRY_AFTER_S)}


class _Row(tuple):
    """A row readable by position and by column name, like ``sqlite3.Row``."""

    names: dict[str, int]

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return tuple.__getitem__(self, self.names[key])
        return tuple.__getitem__(self, key)


def _row_factory(cursor: Any) -> Any:
    if cursor.description is None:
        return tuple
    names = {c.name: i for i, c in enumerate(cursor.description)}
    row_type = type("Row", (_Row,), {"names": names})
    return lambda values: row_type(values)


def _pg(sql: str) -> str:
    # our SQL uses '?' placeholders and no literal '?' or '%'
    return sql.replace("?", "%s")


class PostgresCatalog(SqlCatalog):
    """One connection guarded by a lock, as the SQLite catalog (a process's writes are ordered anyway)."""

    dialect = "postgres"
    _skip_locked = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str) -> None:
        self.url = url
        self._db = self._connect()
        self._in_tx = threading.local()
        super().__init__()

    def _connect(self) -> psycopg.Connection:
        try:
            return psycopg.connect(self.url, autocommit=True, row_factory=_row_factory, connect_timeout=CONNECT_TIMEOUT_S)
        except psycopg.OperationalError as exc:  # refused, starting up (57P03), shutting down: retry later
            raise CatalogUnavailable(exc) from exc

    def _lost(self) -> bool:
        """Whether the connection is gone (the server restarted or dropped it), not merely a failed statement."""
        return self._db.closed or self._db.broken

    def _reconnect_if_lost(self) -> None:
        if self._lost():
            self._db = self._connect()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _execute(self, sql: str, params: tuple | list = ()) -> Any:
        refuse_nul(params)  # psycopg would raise DataError, a 500; see app/storage/text_rules.py
        if getattr(self._in_tx, "active", False):
            return self._db.execute(_pg(sql), params)  # errors are judged by _transaction
        # outside a transaction every statement is a read or an idempotent update (a lease, a
        # prune): one retry on a fresh connection is safe when the old one turned out dead
        for attempt in (1, 2):
            self._reconnect_if_lost()
            try:
                return self._db.execute(_pg(sql), params)
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not self._lost():
                    raise  # the server answered (a full disk, a cancelled statement): not an outage
                if attempt == 2:
                    raise CatalogUnavailable(exc) from exc
        raise AssertionError("unreachable")

    def _executemany(self, sql: str, rows: list[tuple]) -> None:
        for row in rows:
            refuse_nul(row)
        with self._db.cursor() as cur:
            cur.executemany(_pg(sql), rows)

    def _begin(self, stack: ExitStack) -> None:
        """BEGIN, on a fresh connection if the current one turns out dead (nothing has been sent in it yet)."""
        for attempt in (1, 2):
            self._reconnect_if_lost()
            try:
                stack.enter_context(self._db.transaction())
                return
            except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                if not self._lost() or attempt == 2:
                    raise CatalogUnavailable(exc) from exc

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._in_tx.active = True
        try:
            with ExitStack() as stack:
                self._begin(stack)
                yield
        except pg_errors.DiskFull as exc:  # SQLSTATE 53100: rolled back, like SQLite's SQLITE_FULL
            raise InsufficientStorage(PG_FULL, details={"reason": "disk_full"}) from exc
        except pg_errors.ReadOnlySqlTransaction as exc:  # 25006: a read-only standby, or writes switched off
            raise StorageReadOnly(PG_READ_ONLY, details={"reason": "read_only"}) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            if self._lost():  # mid-transaction: rolled back by the server, or unknown if it died in COMMIT
                raise CatalogUnavailable(exc) from exc
            raise
        finally:
            self._in_tx.active = False

    def _lock_collection(self, name: str) -> None:
        self._execute("SELECT 1 FROM collections WHERE name = ? FOR UPDATE", (name,))

    def _before_migrations(self) -> None:
        self._execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK,))

    def _insert_id(self, sql: str, params: tuple, id_column: str) -> int:
        return int(self._execute(f"{sql} RETURNING {id_column}", params).fetchone()[0])

    def _insert_segments(self, rows: list[tuple]) -> list[int]:
        if not rows:
            return []
        for row in rows:
            refuse_nul(row)
        # ids drawn from the column's own sequence, then one COPY: an order of magnitude fewer
        # round trips and parse steps than a row-by-row INSERT ... RETURNING
        ids = sorted(int(r[0]) for r in self._execute(
            "SELECT nextval(pg_get_serial_sequence('segments', 'segment_id')) FROM generate_series(1, ?)", (len(rows),)))
        with self._db.cursor() as cur:
            with cur.copy('COPY segments (segment_id, collection, item_id, start, "end", embedding, code, seq, shard_key)'
                          " FROM STDIN") as copy:
                for sid, row in zip(ids, rows):
                    copy.write_row((sid, *row))
        return ids

    def _duplicate_errors(self) -> tuple[type[BaseException], ...]:
        return (pg_errors.UniqueViolation,)
