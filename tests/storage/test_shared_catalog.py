"""Migrations, jobs, shard partitions and replay: the semantics both catalog backends share.

Every test runs on SQLite and on PostgreSQL (the session's throwaway server).
"""

from __future__ import annotations

import sqlite3
import threading
import time

import numpy as np
import pytest

from app.encoders.base import l2_normalise, sign_codes
from app.storage import migrations
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex

DIM, BITS = 16, 16


def _collection(name="c"):
    return Collection(name, "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 1.0)


def _item(item_id, n=2, seed=0):
    raw = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return NewItem(item_id, None, None, None, {}, np.array([[i, i + 1.0] for i in range(n)]), l2_normalise(raw), sign_codes(raw))


def test_a_fresh_catalog_is_at_the_latest_schema(open_catalog):
    assert open_catalog().schema_version() == migrations.LATEST
    assert open_catalog().schema_version() == migrations.LATEST  # reopening applies nothing twice


def test_a_catalog_from_before_migrations_is_adopted_and_backfilled(tmp_path):
    # the schema every SQLite catalog had before migrations existed: no schema_version, no shard_key
    old = sqlite3.connect(tmp_path / "old.db")
    old.executescript(migrations.MIGRATIONS[0].ddl.format(**migrations.DIALECTS["sqlite"]))
    old.execute("INSERT INTO collections VALUES ('c','audio','x','[\"binary\"]',8,16,1.0,0.5,0,'',1.0)")
    old.execute("INSERT INTO writes (collection, at) VALUES ('c', 1.0)")
    old.execute("INSERT INTO items (collection, id, metadata, seq, created_at) VALUES ('c', 'rec-1', '{}', 1, 1.0)")
    old.execute("INSERT INTO segments (collection, item_id, start, \"end\", embedding, code, seq) VALUES ('c','rec-1',0,1,x'00',x'0000',1)")
    old.commit()
    old.close()
    catalog = Catalog(tmp_path / "old.db")
    assert catalog.schema_version() == migrations.LATEST
    assert catalog.counts("c") == (1, 1)
    key = migrations.shard_key("rec-1")
    assert list(catalog.all_segment_ids("c", shard=(key % 3, 3))) == [1]
    assert list(catalog.all_segment_ids("c", shard=((key + 1) % 3, 3))) == []


def test_a_catalog_from_a_newer_release_is_refused(tmp_path):
    Catalog(tmp_path / "c.db").close()
    db = sqlite3.connect(tmp_path / "c.db")
    db.execute("INSERT INTO schema_version VALUES (?, 0)", (migrations.LATEST + 1,))
    db.commit()
    db.close()
    with pytest.raises(migrations.SchemaTooNew):
        Catalog(tmp_path / "c.db")


def test_shard_partitions_cover_every_segment_once_with_items_whole(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item(f"item-{i}", n=1 + i % 3, seed=i) for i in range(40)])
    everything = np.sort(catalog.all_segment_ids("c"))
    parts = [catalog.all_segment_ids("c", shard=(s, 4)) for s in range(4)]
    assert np.array_equal(np.sort(np.concatenate(parts)), everything)
    assert all(len(p) for p in parts)  # 40 items over 4 shards: none empty (crc32 spreads them)
    owners = catalog.segment_items("c", everything)
    for number, part in enumerate(parts):
        for sid in part.tolist():
            assert migrations.shard_key(owners[sid][0]) % 4 == number
    streamed = np.concatenate([ids for ids, _, _ in catalog.iter_segments("c", DIM, BITS, shard=(1, 4), chunk=3)])
    assert np.array_equal(np.sort(streamed), np.sort(parts[1]))


def test_catch_up_replays_exactly_what_another_writer_committed(open_catalog):
    writer, reader = open_catalog(), open_catalog()
    writer.create_collection(_collection())
    writer.upsert_items("c", [_item("a"), _item("b", seed=1)])
    index = CollectionIndex.build(reader.get_collection("c"), reader, shards=1)
    writer.upsert_items("c", [_item("a", n=3, seed=2)])  # replaces a: tombstones + new rows
    writer.delete_item("c", "b")
    writer.upsert_items("c", [_item("d", seed=3)])
    assert index.catch_up(reader) == reader.last_seq("c")
    expected = np.sort(reader.all_segment_ids("c"))
    for _, ix in index.indices():
        assert np.array_equal(ix.ids(), expected)
    a_ids, _, a_floats, a_codes = reader.item_segments("c", "a", DIM, BITS)
    assert np.array_equal(index.float.reconstruct(a_ids), a_floats) and np.array_equal(index.binary.reconstruct(a_ids), a_codes)
    # our own write, with another process's write in between: replayed, not skipped
    other = writer.upsert_items("c", [_item("e", seed=4)])
    mine = reader.upsert_items("c", [_item("f", seed=5)])
    index.apply_shared(mine, reader)
    assert index.applied_seq == mine.seq > other.seq
    assert np.array_equal(index.binary.ids(), np.sort(reader.all_segment_ids("c")))
    index.apply_shared(mine, reader)  # already replayed: nothing happens (no duplicate ids)
    assert len(index) == len(reader.all_segment_ids("c"))


def test_jobs_are_claimed_once_renewed_and_taken_over_when_the_lease_lapses(open_catalog):
    catalog, other = open_catalog(), open_catalog()
    catalog.create_job("j1", "c", [("a.wav", "a", {"x": 1}, b"RIFF1"), ("b.wav", None, {}, b"RIFF2")], now=100.0)
    assert catalog.get_job("j1") == {"id": "j1", "collection": "c", "status": "queued", "total": 2, "done": 0,
                                     "indexed": 0, "created_at": 100.0, "finished_at": None, "errors": []}
    assert other.job_files("j1") == [("a.wav", "a", {"x": 1}, b"RIFF1"), ("b.wav", None, {}, b"RIFF2")]
    assert catalog.claim_job("runner-1", now=101.0, lease_s=10) == "j1"
    assert other.claim_job("runner-2", now=105.0, lease_s=10) is None  # leased
    assert catalog.renew_job("j1", "runner-1", until=120.0, done=1, errors=[{"file": "b.wav"}])
    assert other.get_job("j1")["done"] == 1 and other.get_job("j1")["errors"] == [{"file": "b.wav"}]
    assert other.claim_job("runner-2", now=119.0, lease_s=10) is None
    assert other.claim_job("runner-2", now=121.0, lease_s=10) == "j1"  # runner-1 went silent
    assert not catalog.renew_job("j1", "runner-1", until=200.0)  # and may not take it back
    other.finish_job("j1", "completed", now=130.0, indexed=2, errors=[], done=2)
    job = catalog.get_job("j1")
    assert (job["status"], job["done"], job["indexed"], job["finished_at"]) == ("completed", 2, 2, 130.0)
    assert catalog.job_files("j1") == []  # the files are in the catalog proper now
    assert catalog.claim_job("runner-3", now=999.0, lease_s=10) is None and catalog.get_job("nope") is None


def test_concurrent_writers_get_sequences_in_commit_order(open_catalog):
    """Sequence order must be commit order per collection, or a replay could skip a write."""
    first = open_catalog()
    first.create_collection(_collection())
    writers = [open_catalog() for _ in range(3)]
    seqs: list[int] = []
    lock = threading.Lock()

    def write(catalog, n):
        for i in range(8):
            result = catalog.upsert_items("c", [_item(f"w{n}-{i}", seed=i)])
            with lock:
                seqs.append(result.seq)

    threads = [threading.Thread(target=write, args=(w, n)) for n, w in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader = open_catalog()
    index = CollectionIndex.build(_collection(), reader, shards=1)
    assert index.applied_seq == max(seqs) and len(index) == 2 * 24
    assert reader.counts("c") == (24, 48)


def test_expired_tombstones_make_a_replica_behind_the_horizon_rebuild(open_catalog):
    writer, reader = open_catalog(), open_catalog()
    writer.create_collection(_collection())
    writer.upsert_items("c", [_item("a"), _item("b", seed=1), _item("c", seed=2)])
    behind = CollectionIndex.build(reader.get_collection("c"), reader, shards=1)
    current = CollectionIndex.build(reader.get_collection("c"), reader, shards=1)
    scanned_object = behind.binary  # a shared scan holds this object: it must stay the one updated
    writer.delete_item("c", "b")
    writer.upsert_items("c", [_item("a", n=3, seed=7)])
    current.catch_up(reader)
    assert writer.tombstone_horizon("c") == 0
    horizon = writer.expire_tombstones("c", older_than=time.time() + 1)
    assert horizon == writer.last_seq("c") and len(writer.tombstones_after("c", 0)) == 0
    writer.upsert_items("c", [_item("d", seed=3)])
    behind.catch_up(reader)  # its tombstones are gone: rebuilt, in place
    current.catch_up(reader)  # was past the horizon: replayed as usual
    expected = np.sort(reader.all_segment_ids("c"))
    for index in (behind, current):
        assert np.array_equal(index.binary.ids(), expected) and np.array_equal(index.float.ids(), expected)
    assert behind.binary is scanned_object
    assert writer.expire_tombstones("c", older_than=0) == horizon  # the horizon never moves back
