"""The catalog's operations, written once in SQL that SQLite and PostgreSQL both accept.

A backend subclass supplies the connection, the placeholder style, transactions, how a row id
comes back from an INSERT, and how writers to one collection are put in order. Everything else
(sequence numbers, tombstones, replay queries, jobs) is here, so both backends have the same
semantics by construction and the same tests run against both.

Sequence numbers: every write transaction inserts a row into ``writes`` and uses its id. For
replay to be exact, sequence order must equal commit order within a collection; the backend's
``_lock_collection`` guarantees it (SQLite: one writer at a time anyway; PostgreSQL: a row lock
on the collection taken before the sequence number, held to commit). So when a reader sees
``last_seq(c) == S``, every write to ``c`` numbered at most S is committed and visible.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import AbstractContextManager
from typing import Any, Iterator

import numpy as np

from app.errors import Conflict, NotFound
from app.storage import migrations
from app.storage.job_rows import JobRows
from app.storage.records import Collection, NewItem, WriteResult
from app.storage.sql_rows import chunks, collection_of_row, item_of_row, unpack_segments
from app.storage.text_rules import is_item_id


class SqlCatalog(JobRows):
    """Collections, items, segments, embeddings, codes, tombstones and jobs in one transactional store."""

    dialect: str = ""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._migrate()

    # --- backend hooks ------------------------------------------------------------------------

    def _execute(self, sql: str, params: tuple | list = ()) -> Any:
        """Run one statement (``?`` placeholders); returns a cursor."""
        raise NotImplementedError

    def _transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _lock_collection(self, name: str) -> None:
        """Order the writers of one collection (called first inside a write transaction)."""

    def _insert_id(self, sql: str, params: tuple, id_column: str) -> int:
        raise NotImplementedError

    def _insert_segments(self, rows: list[tuple]) -> list[int]:
        """Insert segment rows; returns their new ids in order."""
        return [self._insert_id(_SEGMENT_INSERT, row, "segment_id") for row in rows]

    def _is_duplicate(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _duplicate_errors(self) -> tuple[type[BaseException], ...]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _rows(self, sql: str, params: tuple | list = ()) -> list[Any]:
        return self._execute(sql, params).fetchall()

    def _one(self, sql: str, params: tuple | list = ()) -> Any:
        return self._execute(sql, params).fetchone()

    # --- schema ---------------------------------------------------------------------------------

    def _schema_version(self) -> int:
        self._execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, applied_at " +
                      migrations.DIALECTS[self.dialect]["real"] + " NOT NULL)")
        row = self._one("SELECT MAX(version) FROM schema_version")
        return int(row[0] or 0)

    def _migrate(self) -> None:
        with self._lock, self._transaction():
            self._before_migrations()
            for migration in migrations.pending(self._schema_version()):
                for statement in migration.statements(self.dialect):
                    self._execute(statement)
                if migration.backfill is not None:
                    migration.backfill(self._rows)
                self._execute("INSERT INTO schema_version VALUES (?, ?)", (migration.version, time.time()))

    def _before_migrations(self) -> None:
        """Serialise concurrent migrators (several processes starting at once)."""

    def schema_version(self) -> int:
        with self._lock:
            return int(self._one("SELECT MAX(version) FROM schema_version")[0] or 0)

    # --- collections ----------------------------------------------------------------------------

    def create_collection(self, c: Collection) -> None:
        with self._lock:
            try:
                with self._transaction():
                    self._execute(
                        "INSERT INTO collections (name, modality, encoder, index_kinds, dim, bits, window_s, hop_s,"
                        " keep_media, description, created_at, encoder_version, index_spec) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (c.name, c.modality, c.encoder, json.dumps(list(c.index_kinds)), c.dim, c.bits,
                         c.window_s, c.hop_s, int(c.keep_media), c.description, c.created_at, c.encoder_version,
                         json.dumps(c.index_spec.to_json())),
                    )
            except self._duplicate_errors() as exc:
                raise Conflict(f"collection {c.name!r} already exists") from exc

    def get_collection(self, name: str) -> Collection:
        with self._lock:
            row = self._one("SELECT * FROM collections WHERE name = ?", (name,))
        if row is None:
            raise NotFound(f"no collection named {name!r}; GET /v1/collections lists them")
        return collection_of_row(row)

    def list_collections(self) -> list[Collection]:
        with self._lock:
            rows = self._rows("SELECT * FROM collections ORDER BY name")
        return [collection_of_row(r) for r in rows]

    def collection_version(self, name: str) -> tuple[float, int] | None:
        """(created_at, last sequence) of a collection, or None when it does not exist: one round trip.

        Another process's commits show up here; a different created_at means the collection was
        deleted and created again under the same name.
        """
        with self._lock:
            row = self._one(
                "SELECT created_at, (SELECT MAX(seq) FROM writes w WHERE w.collection = c.name) FROM collections c WHERE name = ?",
                (name,),
            )
        return None if row is None else (float(row[0]), int(row[1] or 0))

    def delete_collection(self, name: str) -> list[str]:
        """Remove a collection and everything in it; returns media paths to delete."""
        with self._lock, self._transaction():
            self._lock_collection(name)
            self.get_collection(name)
            media = [r[0] for r in self._rows(
                "SELECT media_path FROM items WHERE collection = ? AND media_path IS NOT NULL", (name,))]
            for table in ("segments", "tombstones", "items", "writes", "tombstone_horizons"):
                self._execute(f"DELETE FROM {table} WHERE collection = ?", (name,))
            self._execute("DELETE FROM collections WHERE name = ?", (name,))
        return media

    # --- writes -----------------------------------------------------------------------------------

    def upsert_items(self, collection: str, items: list[NewItem]) -> WriteResult:
        """Insert items, replacing any with the same id, in one transaction."""
        with self._lock, self._transaction():
            self._lock_collection(collection)
            seq = self._next_seq(collection)
            result = WriteResult(seq=seq)
            rows, floats, codes = [], [], []
            now = time.time()
            for item in items:
                removed, media = self._delete_item_rows(collection, item.id, seq)
                result.removed_segment_ids += removed
                if media:
                    result.replaced_media.append(media)
                self._execute(
                    "INSERT INTO items (collection, id, filename, media_type, media_path, duration_s, width, height,"
                    " metadata, seq, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (collection, item.id, item.filename, item.media_type, item.media_path, item.duration_s,
                     item.width, item.height, json.dumps(item.metadata), seq, now),
                )
                key = migrations.shard_key(item.id)
                for (start, end), vec, code in zip(item.times, item.floats, item.codes):
                    rows.append((collection, item.id, float(start), float(end),
                                 np.ascontiguousarray(vec, np.float32).tobytes(),
                                 np.ascontiguousarray(code, np.uint8).tobytes(), seq, key))
                floats.append(item.floats)
                codes.append(item.codes)
            result.added_segment_ids = np.asarray(self._insert_segments(rows), dtype=np.int64)
            result.added_floats = np.concatenate(floats).astype(np.float32) if floats else None
            result.added_codes = np.concatenate(codes).astype(np.uint8) if codes else None
        return result

    def delete_item(self, collection: str, item_id: str) -> WriteResult:
        if not is_item_id(item_id):  # could never have been stored (and PostgreSQL cannot compare a NUL)
            raise NotFound(f"collection {collection!r} has no item {item_id[:40]!r}")
        with self._lock, self._transaction():
            self._lock_collection(collection)
            if self._one("SELECT 1 FROM items WHERE collection = ? AND id = ?", (collection, item_id)) is None:
                raise NotFound(f"collection {collection!r} has no item {item_id!r}")
            seq = self._next_seq(collection)
            removed, media = self._delete_item_rows(collection, item_id, seq)
        return WriteResult(seq=seq, removed_segment_ids=removed, replaced_media=[media] if media else [])

    def _delete_item_rows(self, collection: str, item_id: str, seq: int) -> tuple[list[int], str | None]:
        row = self._one("SELECT media_path FROM items WHERE collection = ? AND id = ?", (collection, item_id))
        if row is None:
            return [], None
        removed = [int(r[0]) for r in self._rows(
            "SELECT segment_id FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id))]
        if removed:
            self._executemany("INSERT INTO tombstones (seq, collection, segment_id) VALUES (?,?,?)",
                              [(seq, collection, s) for s in removed])
        self._execute("DELETE FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id))
        self._execute("DELETE FROM items WHERE collection = ? AND id = ?", (collection, item_id))
        return removed, row[0]

    def _executemany(self, sql: str, rows: list[tuple]) -> None:
        for row in rows:
            self._execute(sql, row)

    def _next_seq(self, collection: str) -> int:
        return self._insert_id("INSERT INTO writes (collection, at) VALUES (?, ?)", (collection, time.time()), "seq")

    # --- reads ------------------------------------------------------------------------------------

    def get_item(self, collection: str, item_id: str) -> dict[str, Any]:
        if not is_item_id(item_id):  # could never have been stored (and PostgreSQL cannot compare a NUL)
            raise NotFound(f"collection {collection!r} has no item {item_id[:40]!r}")
        with self._lock:
            row = self._one("SELECT * FROM items WHERE collection = ? AND id = ?", (collection, item_id))
            if row is None:
                raise NotFound(f"collection {collection!r} has no item {item_id!r}")
            n = self._one("SELECT COUNT(*) FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id))[0]
        return item_of_row(row, int(n))

    def list_items(self, collection: str, limit: int, offset: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._rows(
                "SELECT i.*, (SELECT COUNT(*) FROM segments s WHERE s.collection = i.collection AND s.item_id = i.id) AS n"
                " FROM items i WHERE collection = ? ORDER BY id LIMIT ? OFFSET ?",
                (collection, limit, offset),
            )
        return [item_of_row(r, int(r["n"])) for r in rows]

    def items_by_id(self, collection: str, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for chunk in chunks([i for i in item_ids if is_item_id(i)], 500):
                marks = ",".join("?" * len(chunk))
                for row in self._rows(f"SELECT * FROM items WHERE collection = ? AND id IN ({marks})", (collection, *chunk)):
                    out[row["id"]] = item_of_row(row, None)
        return out

    def counts(self, collection: str) -> tuple[int, int]:
        """(items, segments) in a collection."""
        with self._lock:
            items = self._one("SELECT COUNT(*) FROM items WHERE collection = ?", (collection,))[0]
            segments = self._one("SELECT COUNT(*) FROM segments WHERE collection = ?", (collection,))[0]
        return int(items), int(segments)

    def segment_items(self, collection: str, segment_ids: np.ndarray) -> dict[int, tuple[str, float, float]]:
        """segment id -> (item id, start, end) for the given ids that exist."""
        out: dict[int, tuple[str, float, float]] = {}
        with self._lock:
            for chunk in chunks([int(s) for s in segment_ids], 500):
                marks = ",".join("?" * len(chunk))
                # Look up by segment id alone and check the collection here: with the collection
                # in the WHERE clause SQLite's planner (no statistics) scans the whole collection
                # through segments_by_seq, 25 ms at 10^5 segments, instead of k primary-key probes.
                for sid, owner, item, start, end in self._rows(
                    f'SELECT segment_id, collection, item_id, start, "end" FROM segments WHERE segment_id IN ({marks})',
                    tuple(chunk),
                ):
                    if owner == collection:
                        out[int(sid)] = (item, start, end)
        return out

    def item_segments(self, collection: str, item_id: str, dim: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(segment ids, times (n,2), floats (n,dim), codes (n,bits/8)) of one item, in time order."""
        with self._lock:
            rows = [] if not is_item_id(item_id) else self._rows(
                'SELECT segment_id, start, "end", embedding, code FROM segments WHERE collection = ? AND item_id = ? ORDER BY start, segment_id',
                (collection, item_id),
            )
        return unpack_segments(rows, dim, bits)

    def segments_of_items(self, collection: str, item_ids: list[str], dim: int, bits: int) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """:meth:`item_segments` of several items in one round trip per 500 items (a search's hits:
        one query instead of one per hit); items without segments are absent."""
        grouped: dict[str, list[Any]] = {}
        with self._lock:
            for chunk in chunks([i for i in dict.fromkeys(item_ids) if is_item_id(i)], 500):
                marks = ",".join("?" * len(chunk))
                for row in self._rows(
                    f'SELECT item_id, segment_id, start, "end", embedding, code FROM segments'
                    f" WHERE collection = ? AND item_id IN ({marks}) ORDER BY item_id, start, segment_id",
                    (collection, *chunk),
                ):
                    grouped.setdefault(row[0], []).append(tuple(row)[1:])
        return {item: unpack_segments(rows, dim, bits) for item, rows in grouped.items()}

    def last_seq(self, collection: str) -> int:
        with self._lock:
            row = self._one("SELECT MAX(seq) FROM writes WHERE collection = ?", (collection,))
        return int(row[0] or 0)

    def writes_between(self, collection: str, after: int, before: int) -> int:
        """How many writes to a collection are numbered strictly between two sequences."""
        with self._lock:
            row = self._one("SELECT COUNT(*) FROM writes WHERE collection = ? AND seq > ? AND seq < ?", (collection, after, before))
        return int(row[0])

    def iter_segments(
        self, collection: str, dim: int, bits: int, *, after_seq: int = 0, upto_seq: int | None = None,
        shard: tuple[int, int] | None = None, chunk: int = 50_000,
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(ids, floats, codes) chunks of segments with ``after_seq < seq <= upto_seq`` (all when 0 / None).

        ``shard=(number, count)`` keeps the segments whose item hashes to that shard.
        """
        last_id = -1
        where, extra = _seq_filter(upto_seq, shard)
        while True:
            with self._lock:
                rows = self._rows(
                    'SELECT segment_id, start, "end", embedding, code FROM segments'
                    f" WHERE collection = ? AND seq > ? AND segment_id > ?{where} ORDER BY segment_id LIMIT ?",
                    (collection, after_seq, last_id, *extra, chunk),
                )
            if not rows:
                return
            ids, _, floats, codes = unpack_segments(rows, dim, bits)
            last_id = int(ids[-1])
            yield ids, floats, codes

    def tombstones_after(self, collection: str, seq: int, upto_seq: int | None = None) -> np.ndarray:
        upto = "" if upto_seq is None else " AND seq <= ?"
        with self._lock:
            rows = self._rows(f"SELECT segment_id FROM tombstones WHERE collection = ? AND seq > ?{upto}",
                              (collection, seq) if upto_seq is None else (collection, seq, upto_seq))
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def prune_tombstones(self, collection: str, upto_seq: int) -> None:
        """Tombstones at or below a snapshot's sequence are no longer needed for replay."""
        with self._lock:
            self._execute("DELETE FROM tombstones WHERE collection = ? AND seq <= ?", (collection, upto_seq))

    def tombstone_horizon(self, collection: str) -> int:
        """Tombstones at or below this sequence may be gone (expired): replaying from before it is not exact."""
        with self._lock:
            row = self._one("SELECT seq FROM tombstone_horizons WHERE collection = ?", (collection,))
        return int(row[0]) if row else 0

    def expire_tombstones(self, collection: str, older_than: float) -> int:
        """Cluster mode: drop tombstones of writes made before ``older_than`` (epoch seconds); returns the horizon.

        No snapshot tells when every reader is past a tombstone (API processes and shard actors
        replay on their own schedules), so they are kept for a retention period instead; a reader
        further behind than that sees the horizon move past it and rebuilds (CollectionIndex.catch_up).
        """
        with self._lock, self._transaction():
            self._lock_collection(collection)
            row = self._one("SELECT MAX(seq) FROM writes WHERE collection = ? AND at < ?", (collection, older_than))
            horizon = int(row[0] or 0)
            if horizon:
                self._execute("DELETE FROM tombstones WHERE collection = ? AND seq <= ?", (collection, horizon))
                self._execute(
                    "INSERT INTO tombstone_horizons (collection, seq) VALUES (?, ?) ON CONFLICT (collection) DO UPDATE"
                    " SET seq = CASE WHEN excluded.seq > tombstone_horizons.seq THEN excluded.seq ELSE tombstone_horizons.seq END",
                    (collection, horizon),
                )
            row = self._one("SELECT seq FROM tombstone_horizons WHERE collection = ?", (collection,))
        return int(row[0]) if row else 0

    def count_segments(self, collection: str, shard: tuple[int, int] | None = None) -> int:
        where, extra = _seq_filter(None, shard)
        with self._lock:
            return int(self._one(f"SELECT COUNT(*) FROM segments WHERE collection = ?{where}", (collection, *extra))[0])

    def all_segment_ids(self, collection: str, shard: tuple[int, int] | None = None) -> np.ndarray:
        where, extra = _seq_filter(None, shard)
        with self._lock:
            rows = self._rows(f"SELECT segment_id FROM segments WHERE collection = ?{where}", (collection, *extra))
        return np.asarray([r[0] for r in rows], dtype=np.int64)


_SEGMENT_INSERT = ('INSERT INTO segments (collection, item_id, start, "end", embedding, code, seq, shard_key)'
                   " VALUES (?,?,?,?,?,?,?,?)")


def _seq_filter(upto_seq: int | None, shard: tuple[int, int] | None) -> tuple[str, tuple]:
    where, extra = "", ()
    if upto_seq is not None:
        where += " AND seq <= ?"
        extra += (upto_seq,)
    if shard is not None:
        number, count = shard
        # MOD() and %: PostgreSQL has both spellings, SQLite only %; '%' would clash with psycopg placeholders
        where += " AND shard_key - (shard_key / ?) * ? = ?"
        extra += (count, count, number)
    return where, extra
