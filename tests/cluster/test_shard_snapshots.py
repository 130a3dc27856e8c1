"""A killed shard actor restarts from its snapshot plus the catalog's tail, not from the whole catalog.

The snapshot is the single-process index's format (app/storage/index_store.py), one folder per shard
actor; the tail is the writes after its sequence, of the shard's own partition: new items, a replaced
item and a deleted one. After each restart the shard says how it was opened, answers as one index
over the catalog would (a brute-force reference), and the checker (app/cluster/consistency.py)
finds no difference between any shard and the catalog. A corrupt snapshot, and tombstones expired
past the snapshot, are handled too (rebuild; replay made equal in place).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from app.cluster.consistency import check_shards
from app.cluster.remote_index import RemoteCollectionIndex, actor_name
from app.cluster.shard_actor import snapshot_folder
from app.cluster.topk import ordered_topk
from app.encoders.base import l2_normalise, sign_codes
from app.index import BinaryIndex, FloatIndex
from app.settings import Settings
from app.storage.index_store import CollectionIndex
from app.storage.postgres import PostgresCatalog
from app.storage.records import Collection, NewItem

DIM, BITS = 16, 16


def _items(rng, names, windows=3):
    out = []
    for name in names:
        raw = rng.standard_normal((windows, DIM)).astype(np.float32)
        out.append(NewItem(name, None, None, None, {}, np.zeros((windows, 2)), l2_normalise(raw), sign_codes(raw)))
    return out


def _restart(ray, actor, old_pid: int) -> dict:
    """Kill the actor (Ray restarts it) and return its stats once the new one answers."""
    ray.kill(actor, no_restart=False)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            stats = ray.get(actor.stats.remote(), timeout=10)
            if stats["pid"] != old_pid:
                return stats
        except Exception:  # noqa: BLE001 - still restarting
            pass
        time.sleep(0.1)
    raise AssertionError("the shard actor did not restart")


def _same_answers(sharded, catalog, collection, queries):
    one = CollectionIndex.build(collection, catalog, shards=1)  # the reference: one index over the catalog
    sharded.catch_up(catalog)  # as an API process does before a search: the shards replay to the latest write
    for kind, cls in (("binary", BinaryIndex), ("float", FloatIndex)):
        got = getattr(sharded, kind).search(queries[kind], 9)
        want = ordered_topk(getattr(one, kind), queries[kind], 9, cls.ASCENDING, cls.PAD_VALUE)
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0]), kind


@pytest.mark.slow
def test_a_killed_shard_restarts_from_its_snapshot_and_the_catalog_tail(tmp_path, pg_url, ray_session):
    ray = ray_session
    catalog = PostgresCatalog(pg_url)
    collection = Collection("s", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 5.0)
    catalog.create_collection(collection)
    rng = np.random.default_rng(11)
    catalog.upsert_items("s", _items(rng, [f"i{n}" for n in range(80)]))
    settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=2,
                        cluster={"shard_snapshot_dir": tmp_path / "snaps", "shard_snapshot_s": 3600.0})
    sharded = RemoteCollectionIndex.open(collection, settings)
    raw = rng.standard_normal((5, DIM)).astype(np.float32)
    queries = {"binary": sign_codes(raw), "float": l2_normalise(raw)}
    first = sharded.shard_stats()
    assert [s["opened"]["from"] for s in first] == ["catalog", "catalog"]  # nothing to load the first time
    snapshot_seq = ray.get([actor.snapshot.remote() for actor in sharded.actors])
    assert snapshot_seq == [catalog.last_seq("s")] * 2

    # the tail: new items, one replaced (new vectors, same id), one deleted
    catalog.upsert_items("s", _items(rng, [f"n{n}" for n in range(20)] + ["i5"]))
    catalog.delete_item("s", "i7")
    tail_end = catalog.last_seq("s")
    sharded.catch_up(catalog)
    victim = sharded.actors[1]
    stats = _restart(ray, victim, first[1]["pid"])
    assert stats["opened"]["from"] == "snapshot", stats
    assert stats["opened"]["snapshot_seq"] == snapshot_seq[1] and stats["opened"]["replayed_to"] == tail_end
    _same_answers(sharded, catalog, collection, queries)
    assert check_shards(catalog, sharded) == []

    # a corrupt snapshot is not trusted: the shard rebuilds its partition from the catalog
    folder = snapshot_folder(str(tmp_path / "snaps"), actor_name(pg_url, collection, 0, 2))
    path = folder / "s.binary.faiss"
    path.write_bytes(path.read_bytes()[:-40])
    stats = _restart(ray, sharded.actors[0], first[0]["pid"])
    assert stats["opened"]["from"] == "catalog", stats
    _same_answers(sharded, catalog, collection, queries)
    assert check_shards(catalog, sharded) == []

    # deletions whose tombstones expired after the snapshot: the tail is made equal to the catalog in place
    ray.get(victim.snapshot.remote())
    catalog.delete_item("s", "i9")
    catalog.delete_item("s", "n3")
    catalog.expire_tombstones("s", time.time() + 1)
    assert len(catalog.tombstones_after("s", 0)) == 0
    stats = _restart(ray, victim, ray.get(victim.pid.remote()))
    assert stats["opened"]["from"] == "snapshot", stats
    _same_answers(sharded, catalog, collection, queries)
    assert check_shards(catalog, sharded) == []

    # the checker does see a shard that disagrees: a row added behind the catalog's back
    ray.get(victim.__ray_call__.remote(lambda self: self.index.float.add(np.array([10**9]), queries["float"][:1])))
    found = check_shards(catalog, sharded)
    assert [(d["shard"], d["kind"], d["extra"], d["missing"]) for d in found] == [(2, "float", 1, 0)]

    sharded.delete_files()  # the collection is gone: so are its shards' snapshots
    assert not folder.exists() and not any((tmp_path / "snaps").iterdir())
    catalog.close()

