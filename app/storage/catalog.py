"""SQLite catalog: the source of truth for collections, items, segments, embeddings and codes.

WAL mode, ``synchronous=FULL``: a write is acknowledged only after its transaction commits, so
it survives a killed process (and a power cut). Every write transaction takes a new sequence
number from ``writes``; segments carry the sequence that added them and ``tombstones`` record the
sequence that removed them, which lets an index snapshot taken at sequence S be brought up to
date by replaying rows with ``seq > S``. Segment ids come from AUTOINCREMENT and are never
reused, so they are stable FAISS ids.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from app.errors import Conflict, NotFound

SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    modality TEXT NOT NULL,
    encoder TEXT NOT NULL,
    index_kinds TEXT NOT NULL,
    dim INTEGER NOT NULL,
    bits INTEGER NOT NULL,
    window_s REAL,
    hop_s REAL,
    keep_media INTEGER NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    filename TEXT,
    media_type TEXT,
    media_path TEXT,
    duration_s REAL,
    width INTEGER,
    height INTEGER,
    metadata TEXT NOT NULL DEFAULT '{}',
    seq INTEGER NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE TABLE IF NOT EXISTS segments (
    segment_id INTEGER PRIMARY KEY AUTOINCREMENT,
    collection TEXT NOT NULL,
    item_id TEXT NOT NULL,
    start REAL NOT NULL,
    end REAL NOT NULL,
    embedding BLOB NOT NULL,
    code BLOB NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS segments_by_item ON segments (collection, item_id);
CREATE INDEX IF NOT EXISTS segments_by_seq ON segments (collection, seq);
CREATE TABLE IF NOT EXISTS tombstones (
    seq INTEGER NOT NULL,
    collection TEXT NOT NULL,
    segment_id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_seq ON tombstones (collection, seq);
CREATE TABLE IF NOT EXISTS writes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    collection TEXT NOT NULL,
    at REAL NOT NULL
);
"""


@dataclass(frozen=True)
class Collection:
    """A collection's definition as stored."""

    name: str
    modality: str
    encoder: str
    index_kinds: tuple[str, ...]
    dim: int
    bits: int
    window_s: float | None
    hop_s: float | None
    keep_media: bool
    description: str
    created_at: float


@dataclass
class NewItem:
    """An item ready to commit: decoded, windowed and encoded."""

    id: str
    filename: str | None
    media_type: str | None
    media_path: str | None
    metadata: dict[str, Any]
    times: np.ndarray  # (n, 2) start/end seconds per segment (zeros for images)
    floats: np.ndarray  # (n, dim) float32
    codes: np.ndarray  # (n, bits // 8) uint8
    duration_s: float | None = None
    width: int | None = None
    height: int | None = None


@dataclass
class WriteResult:
    """What a committed write changed, for applying it to the indices."""

    seq: int
    removed_segment_ids: list[int] = field(default_factory=list)
    added_segment_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    added_floats: np.ndarray | None = None
    added_codes: np.ndarray | None = None
    replaced_media: list[str] = field(default_factory=list)


class Catalog:
    """Thread-safe access to the SQLite catalog (one connection, one lock)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- collections ----------------------------------------------------------------------

    def create_collection(self, c: Collection) -> None:
        with self._lock:
            try:
                self._db.execute(
                    "INSERT INTO collections VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (c.name, c.modality, c.encoder, json.dumps(list(c.index_kinds)), c.dim, c.bits,
                     c.window_s, c.hop_s, int(c.keep_media), c.description, c.created_at),
                )
            except sqlite3.IntegrityError as exc:
                raise Conflict(f"collection {c.name!r} already exists") from exc

    def get_collection(self, name: str) -> Collection:
        with self._lock:
            row = self._db.execute("SELECT * FROM collections WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFound(f"no collection named {name!r}; GET /v1/collections lists them")
        return _collection(row)

    def list_collections(self) -> list[Collection]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM collections ORDER BY name").fetchall()
        return [_collection(r) for r in rows]

    def delete_collection(self, name: str) -> list[str]:
        """Remove a collection and everything in it; returns media paths to delete."""
        with self._lock, self._transaction():
            self.get_collection(name)
            media = [r[0] for r in self._db.execute(
                "SELECT media_path FROM items WHERE collection = ? AND media_path IS NOT NULL", (name,))]
            for table in ("segments", "tombstones", "items", "writes"):
                self._db.execute(f"DELETE FROM {table} WHERE collection = ?", (name,))
            self._db.execute("DELETE FROM collections WHERE name = ?", (name,))
        return media

    # --- writes ---------------------------------------------------------------------------

    def upsert_items(self, collection: str, items: list[NewItem]) -> WriteResult:
        """Insert items, replacing any with the same id, in one transaction."""
        with self._lock, self._transaction():
            seq = self._next_seq(collection)
            result = WriteResult(seq=seq)
            ids, floats, codes = [], [], []
            for item in items:
                removed, media = self._delete_item_rows(collection, item.id, seq)
                result.removed_segment_ids += removed
                if media:
                    result.replaced_media.append(media)
                self._db.execute(
                    "INSERT INTO items VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (collection, item.id, item.filename, item.media_type, item.media_path, item.duration_s,
                     item.width, item.height, json.dumps(item.metadata), seq, time.time()),
                )
                for (start, end), vec, code in zip(item.times, item.floats, item.codes):
                    cur = self._db.execute(
                        "INSERT INTO segments (collection, item_id, start, end, embedding, code, seq)"
                        " VALUES (?,?,?,?,?,?,?)",
                        (collection, item.id, float(start), float(end),
                         np.ascontiguousarray(vec, np.float32).tobytes(), np.ascontiguousarray(code, np.uint8).tobytes(), seq),
                    )
                    ids.append(cur.lastrowid)
                floats.append(item.floats)
                codes.append(item.codes)
            result.added_segment_ids = np.asarray(ids, dtype=np.int64)
            result.added_floats = np.concatenate(floats).astype(np.float32) if floats else None
            result.added_codes = np.concatenate(codes).astype(np.uint8) if codes else None
        return result

    def delete_item(self, collection: str, item_id: str) -> WriteResult:
        with self._lock, self._transaction():
            if self._db.execute("SELECT 1 FROM items WHERE collection = ? AND id = ?", (collection, item_id)).fetchone() is None:
                raise NotFound(f"collection {collection!r} has no item {item_id!r}")
            seq = self._next_seq(collection)
            removed, media = self._delete_item_rows(collection, item_id, seq)
        return WriteResult(seq=seq, removed_segment_ids=removed, replaced_media=[media] if media else [])

    def _delete_item_rows(self, collection: str, item_id: str, seq: int) -> tuple[list[int], str | None]:
        row = self._db.execute("SELECT media_path FROM items WHERE collection = ? AND id = ?", (collection, item_id)).fetchone()
        if row is None:
            return [], None
        removed = [r[0] for r in self._db.execute(
            "SELECT segment_id FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id))]
        self._db.executemany("INSERT INTO tombstones VALUES (?,?,?)", [(seq, collection, s) for s in removed])
        self._db.execute("DELETE FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id))
        self._db.execute("DELETE FROM items WHERE collection = ? AND id = ?", (collection, item_id))
        return removed, row[0]

    def _next_seq(self, collection: str) -> int:
        return int(self._db.execute("INSERT INTO writes (collection, at) VALUES (?, ?)", (collection, time.time())).lastrowid)

    # --- reads ----------------------------------------------------------------------------

    def get_item(self, collection: str, item_id: str) -> dict[str, Any]:
        with self._lock:
            row = self._db.execute("SELECT * FROM items WHERE collection = ? AND id = ?", (collection, item_id)).fetchone()
            if row is None:
                raise NotFound(f"collection {collection!r} has no item {item_id!r}")
            n = self._db.execute("SELECT COUNT(*) FROM segments WHERE collection = ? AND item_id = ?", (collection, item_id)).fetchone()[0]
        return _item(row, n)

    def list_items(self, collection: str, limit: int, offset: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute(
                "SELECT i.*, (SELECT COUNT(*) FROM segments s WHERE s.collection = i.collection AND s.item_id = i.id) AS n"
                " FROM items i WHERE collection = ? ORDER BY id LIMIT ? OFFSET ?",
                (collection, limit, offset),
            ).fetchall()
        return [_item(r, r["n"]) for r in rows]

    def items_by_id(self, collection: str, item_ids: list[str]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        with self._lock:
            for chunk in _chunks(item_ids, 500):
                marks = ",".join("?" * len(chunk))
                for row in self._db.execute(f"SELECT * FROM items WHERE collection = ? AND id IN ({marks})", (collection, *chunk)):
                    out[row["id"]] = _item(row, None)
        return out

    def counts(self, collection: str) -> tuple[int, int]:
        """(items, segments) in a collection."""
        with self._lock:
            items = self._db.execute("SELECT COUNT(*) FROM items WHERE collection = ?", (collection,)).fetchone()[0]
            segments = self._db.execute("SELECT COUNT(*) FROM segments WHERE collection = ?", (collection,)).fetchone()[0]
        return int(items), int(segments)

    def segment_items(self, collection: str, segment_ids: np.ndarray) -> dict[int, tuple[str, float, float]]:
        """segment id -> (item id, start, end) for the given ids that exist."""
        out: dict[int, tuple[str, float, float]] = {}
        with self._lock:
            for chunk in _chunks([int(s) for s in segment_ids], 500):
                marks = ",".join("?" * len(chunk))
                for sid, item, start, end in self._db.execute(
                    f"SELECT segment_id, item_id, start, end FROM segments WHERE collection = ? AND segment_id IN ({marks})",
                    (collection, *chunk),
                ):
                    out[sid] = (item, start, end)
        return out

    def item_segments(self, collection: str, item_id: str, dim: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(segment ids, times (n,2), floats (n,dim), codes (n,bits/8)) of one item, in time order."""
        with self._lock:
            rows = self._db.execute(
                "SELECT segment_id, start, end, embedding, code FROM segments WHERE collection = ? AND item_id = ? ORDER BY start",
                (collection, item_id),
            ).fetchall()
        return _unpack_segments(rows, dim, bits)

    def last_seq(self, collection: str) -> int:
        with self._lock:
            row = self._db.execute("SELECT MAX(seq) FROM writes WHERE collection = ?", (collection,)).fetchone()
        return int(row[0] or 0)

    def iter_segments(self, collection: str, dim: int, bits: int, *, after_seq: int = 0, chunk: int = 50_000) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(ids, floats, codes) chunks of segments added after ``after_seq`` (all when 0)."""
        last_id = -1
        while True:
            with self._lock:
                rows = self._db.execute(
                    "SELECT segment_id, start, end, embedding, code FROM segments"
                    " WHERE collection = ? AND seq > ? AND segment_id > ? ORDER BY segment_id LIMIT ?",
                    (collection, after_seq, last_id, chunk),
                ).fetchall()
            if not rows:
                return
            ids, _, floats, codes = _unpack_segments(rows, dim, bits)
            last_id = int(ids[-1])
            yield ids, floats, codes

    def tombstones_after(self, collection: str, seq: int) -> np.ndarray:
        with self._lock:
            rows = self._db.execute("SELECT segment_id FROM tombstones WHERE collection = ? AND seq > ?", (collection, seq)).fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    def prune_tombstones(self, collection: str, upto_seq: int) -> None:
        """Tombstones at or below a snapshot's sequence are no longer needed for replay."""
        with self._lock:
            self._db.execute("DELETE FROM tombstones WHERE collection = ? AND seq <= ?", (collection, upto_seq))

    def all_segment_ids(self, collection: str) -> np.ndarray:
        with self._lock:
            rows = self._db.execute("SELECT segment_id FROM segments WHERE collection = ?", (collection,)).fetchall()
        return np.asarray([r[0] for r in rows], dtype=np.int64)

    # --- helpers --------------------------------------------------------------------------

    def _transaction(self) -> "_Tx":
        return _Tx(self._db)


class _Tx:
    """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")


def _collection(row: sqlite3.Row) -> Collection:
    return Collection(
        name=row["name"], modality=row["modality"], encoder=row["encoder"],
        index_kinds=tuple(json.loads(row["index_kinds"])), dim=row["dim"], bits=row["bits"],
        window_s=row["window_s"], hop_s=row["hop_s"], keep_media=bool(row["keep_media"]),
        description=row["description"], created_at=row["created_at"],
    )


def _item(row: sqlite3.Row, segments: int | None) -> dict[str, Any]:
    item = {
        "id": row["id"], "filename": row["filename"], "media_type": row["media_type"],
        "has_media": row["media_path"] is not None, "media_path": row["media_path"],
        "duration_s": row["duration_s"], "width": row["width"], "height": row["height"],
        "metadata": json.loads(row["metadata"]), "created_at": row["created_at"],
    }
    if segments is not None:
        item["segments"] = segments
    return item


def _unpack_segments(rows: list[sqlite3.Row], dim: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    times = np.asarray([(r[1], r[2]) for r in rows], dtype=np.float64).reshape(-1, 2)
    floats = np.frombuffer(b"".join(r[3] for r in rows), dtype=np.float32).reshape(-1, dim)
    codes = np.frombuffer(b"".join(r[4] for r in rows), dtype=np.uint8).reshape(-1, bits // 8)
    return ids, times, floats, codes


def _chunks(values: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]
