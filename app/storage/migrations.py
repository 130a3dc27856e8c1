"""Schema migrations shared by the SQLite and the PostgreSQL catalog.

Each migration has a version, DDL for each dialect, and optionally a Python backfill that runs
in the same transaction. ``schema_version`` records what was applied; a catalog opened by an
older release is brought forward on open, and one written by a newer release is refused
rather than misread. Migration 1 is the schema every catalog had before migrations existed
(``CREATE ... IF NOT EXISTS``), so an existing SQLite file is adopted in place.

Why the dialects differ where they do: PostgreSQL's REAL is 4 bytes (times and timestamps need
DOUBLE PRECISION), it calls BLOB BYTEA, and it numbers rows with BIGSERIAL where SQLite uses
AUTOINCREMENT (both never reuse an id, which is what makes segment ids stable FAISS ids).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any, Callable

_BASE = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    modality TEXT NOT NULL,
    encoder TEXT NOT NULL,
    index_kinds TEXT NOT NULL,
    dim INTEGER NOT NULL,
    bits INTEGER NOT NULL,
    window_s {real},
    hop_s {real},
    keep_media INTEGER NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at {real} NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    collection TEXT NOT NULL,
    id TEXT NOT NULL,
    filename TEXT,
    media_type TEXT,
    media_path TEXT,
    duration_s {real},
    width INTEGER,
    height INTEGER,
    metadata TEXT NOT NULL DEFAULT '{{}}',
    seq BIGINT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (collection, id)
);
CREATE TABLE IF NOT EXISTS segments (
    segment_id {serial},
    collection TEXT NOT NULL,
    item_id TEXT NOT NULL,
    start {real} NOT NULL,
    "end" {real} NOT NULL,
    embedding {blob} NOT NULL,
    code {blob} NOT NULL,
    seq BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS segments_by_item ON segments (collection, item_id);
CREATE INDEX IF NOT EXISTS segments_by_seq ON segments (collection, seq);
CREATE TABLE IF NOT EXISTS tombstones (
    seq BIGINT NOT NULL,
    collection TEXT NOT NULL,
    segment_id BIGINT NOT NULL
);
CREATE INDEX IF NOT EXISTS tombstones_by_seq ON tombstones (collection, seq);
CREATE TABLE IF NOT EXISTS writes (
    seq {serial},
    collection TEXT NOT NULL,
    at {real} NOT NULL
);
"""

_JOBS = """
ALTER TABLE segments ADD COLUMN shard_key BIGINT;
CREATE INDEX IF NOT EXISTS writes_by_collection ON writes (collection, seq);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    collection TEXT NOT NULL,
    status TEXT NOT NULL,
    total INTEGER NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    indexed INTEGER NOT NULL DEFAULT 0,
    errors TEXT NOT NULL DEFAULT '[]',
    error TEXT,
    created_at {real} NOT NULL,
    finished_at {real},
    owner TEXT,
    lease_until {real}
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, created_at);
CREATE TABLE IF NOT EXISTS job_files (
    job_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    filename TEXT NOT NULL,
    item_id TEXT,
    metadata TEXT NOT NULL,
    data {blob} NOT NULL,
    PRIMARY KEY (job_id, n)
);
"""

DIALECTS: dict[str, dict[str, str]] = {
    "sqlite": {"real": "REAL", "blob": "BLOB", "serial": "INTEGER PRIMARY KEY AUTOINCREMENT"},
    "postgres": {"real": "DOUBLE PRECISION", "blob": "BYTEA", "serial": "BIGSERIAL PRIMARY KEY"},
}


def shard_key(item_id: str) -> int:
    """A stable 32-bit hash of an item id: ``shard_key % shards`` places all of an item's windows together.

    crc32, not Python's ``hash``: it must be the same in every process and release.
    """
    return zlib.crc32(item_id.encode("utf-8"))


def _backfill_shard_keys(run: Callable[..., Any]) -> None:
    rows = run("SELECT DISTINCT collection, item_id FROM segments WHERE shard_key IS NULL")
    for collection, item_id in rows:
        run("UPDATE segments SET shard_key = ? WHERE collection = ? AND item_id = ?", (shard_key(item_id), collection, item_id))


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    ddl: str
    backfill: Callable[[Callable[..., Any]], None] | None = None

    def statements(self, dialect: str) -> list[str]:
        text = self.ddl.format(**DIALECTS[dialect])
        return [s.strip() for s in text.split(";") if s.strip()]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "collections, items, segments, tombstones, writes", _BASE),
    Migration(2, "segment shard keys; ingest jobs and their files in the catalog", _JOBS, _backfill_shard_keys),
    # NULL for collections created before: they keep resolving the encoder by name
    Migration(3, "collections record the checkpoint version of their encoder",
              "ALTER TABLE collections ADD COLUMN encoder_version TEXT"),
    # cluster mode expires old tombstones; a replica behind the horizon rebuilds instead of replaying
    Migration(4, "the sequence up to which a collection's tombstones were expired",
              "CREATE TABLE IF NOT EXISTS tombstone_horizons (collection TEXT PRIMARY KEY, seq BIGINT NOT NULL)"),
    # JSON {"kind", "nlist", "nprobe"}; NULL for collections created before: kind "auto"
    Migration(5, "collections record their index kind and its parameters",
              "ALTER TABLE collections ADD COLUMN index_spec TEXT"),
)

LATEST = MIGRATIONS[-1].version


class SchemaTooNew(RuntimeError):
    """The catalog was written by a newer release; refusing to guess at its schema."""


def pending(current: int) -> list[Migration]:
    if current > LATEST:
        raise SchemaTooNew(f"catalog schema version {current} is newer than this release knows ({LATEST}); upgrade Recall")
    return [m for m in MIGRATIONS if m.version > current]
