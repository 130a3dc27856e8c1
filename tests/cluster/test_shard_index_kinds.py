"""Cluster shards use the collection's index kind (flat / ivf / auto), on real PostgreSQL and Ray.

Each shard actor trains its own IVF over its partition in the background (flat answers meanwhile),
swaps it in, honours deletes and upserts, snapshots it and comes back with it after a kill. The
reference is brute force over the catalog's codes under the cluster's tie rule (Hamming distance,
then segment id): at nprobe = nlist an IVF scans every list, so the merged answer must equal it
exactly. Codes are uniform random bits (the worst case for an IVF), so a one-list probe misses
neighbours: that is how the tests see the per-query nprobe reach the shards.

Sizes are the smallest an IVF trains at: 10,000 windows per shard (app/index/kinds.py
IVF_MIN_WINDOWS), nlist 16.
"""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from app.api.schemas import IndexPublic
from app.cluster.remote_index import RemoteCollectionIndex, actor_name
from app.cluster.shard_actor import snapshot_folder
from app.encoders.base import l2_normalise
from app.index.kinds import IndexSpec
from app.settings import Settings
from app.storage.postgres import PostgresCatalog
from app.storage.records import Collection, NewItem
from tests.cluster.test_shard_snapshots import _restart

DIM, BITS, WINDOWS, NLIST, K = 8, 256, 80, 16, 10


def _items(rng, names):
    out = []
    for name in names:
        floats = l2_normalise(rng.standard_normal((WINDOWS, DIM)).astype(np.float32))
        codes = rng.integers(0, 256, (WINDOWS, BITS // 8), dtype=np.uint8)
        out.append(NewItem(name, None, None, None, {}, np.zeros((WINDOWS, 2)), floats, codes))
    return out


def _insert(catalog, name, rng, names, batch=50):
    for start in range(0, len(names), batch):
        catalog.upsert_items(name, _items(rng, names[start:start + batch]))


def _brute_force(catalog, name, queries, k):
    """(distances, ids) of the k nearest codes in the catalog, ordered by (distance, id)."""
    parts = list(catalog.iter_segments(name, DIM, BITS))
    ids = np.concatenate([p[0] for p in parts])
    codes = np.concatenate([p[2] for p in parts])
    bits = np.unpackbits(codes, axis=1)
    out_d, out_i = [], []
    for query in queries:
        distances = (bits != np.unpackbits(query)[None, :]).sum(axis=1)
        order = np.lexsort((ids, distances))[:k]
        out_d.append(distances[order])
        out_i.append(ids[order])
    return np.stack(out_d), np.stack(out_i)


def _wait_answering(sharded, want: str, timeout_s: float = 180.0) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = sharded.describe_index()
        if found["answering"] == want and not found["building"]:
            return found
        time.sleep(0.5)
    raise AssertionError(f"shards never all answered from {want}: {found}")


def _open(pg_url, tmp_path, collection, auto_windows=1_000_000):
    settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=2,
                        index={"auto_ivf_windows": auto_windows},
                        cluster={"shard_snapshot_dir": tmp_path / "snaps", "shard_snapshot_s": 3600.0, "shard_timeout_s": 60.0})
    return RemoteCollectionIndex.open(collection, settings)


@pytest.mark.slow
def test_ivf_shards_answer_exactly_at_full_probe_honour_deletes_and_restart_with_their_ivf(tmp_path, pg_url, ray_session):
    ray = ray_session
    catalog = PostgresCatalog(pg_url)
    spec = IndexSpec("ivf", nlist=NLIST, nprobe=1)
    collection = Collection("v", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 5.0, index_spec=spec)
    catalog.create_collection(collection)
    rng = np.random.default_rng(5)
    _insert(catalog, "v", rng, [f"i{n}" for n in range(300)])  # 24,000 windows, ~12,000 per shard
    sharded = _open(pg_url, tmp_path, collection)
    try:
        found = _wait_answering(sharded, "ivf")
        assert [s["answering"] for s in found["shards"]] == ["ivf", "ivf"]
        assert found["nlist"] == NLIST and found["nprobe"] == 1 and sum(s["windows"] for s in found["shards"]) == 24_000
        assert found["trains_at"] == 10_000 and found["trained_on"] >= 20_000
        IndexPublic.model_validate({**found, "setting": spec.to_json()})  # the shape GET /v1/collections/{name} sends

        queries = rng.integers(0, 256, (12, BITS // 8), dtype=np.uint8)
        want = _brute_force(catalog, "v", queries, K)
        got = sharded.binary.search(queries, K, nprobe=NLIST)
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])
        # the collection's nprobe (1) and a query's own (1) probe one list of 16: random codes' neighbours are missed
        default = sharded.binary.search(queries, K)
        assert not np.array_equal(default[1], want[1])
        assert np.array_equal(sharded.binary.search(queries, K, nprobe=1)[1], default[1])

        # delete the item of the nearest window of query 0, replace (upsert) the one of query 1's
        items = catalog.segment_items("v", np.array([want[1][0, 0], want[1][1, 0]]))
        gone = {int(want[1][0, 0]), int(want[1][1, 0])}
        catalog.delete_item("v", items[int(want[1][0, 0])][0])
        catalog.upsert_items("v", _items(rng, [items[int(want[1][1, 0])][0]]))
        sharded.catch_up(catalog)
        for nprobe in (None, 1, 4, NLIST):
            returned = set(sharded.binary.search(queries, K, nprobe=nprobe)[1].ravel().tolist())
            assert not returned & gone, nprobe
        want = _brute_force(catalog, "v", queries, K)
        assert np.array_equal(sharded.binary.search(queries, K, nprobe=NLIST)[1], want[1])

        # a shard killed after snapshotting its IVF loads it: the same kind answers at once, no retraining
        assert ray.get([a.snapshot.remote() for a in sharded.actors]) == [catalog.last_seq("v")] * 2
        folder = snapshot_folder(str(tmp_path / "snaps"), actor_name(pg_url, collection, 1, 2))
        assert (folder / "v.binary.faiss.ivf").exists()
        stats = _restart(ray, sharded.actors[1], ray.get(sharded.actors[1].pid.remote()))
        assert stats["opened"]["from"] == "snapshot", stats
        assert stats["index"]["answering"] == "ivf" and not stats["index"]["building"], stats["index"]
        # a shard without a snapshot rebuilds from the catalog and trains its IVF again in the background
        shutil.rmtree(snapshot_folder(str(tmp_path / "snaps"), actor_name(pg_url, collection, 0, 2)))
        stats = _restart(ray, sharded.actors[0], ray.get(sharded.actors[0].pid.remote()))
        assert stats["opened"]["from"] == "catalog", stats
        found = _wait_answering(sharded, "ivf")
        assert found["kind"] == "ivf" and [s["answering"] for s in found["shards"]] == ["ivf", "ivf"]
        assert np.array_equal(sharded.binary.search(queries, K, nprobe=NLIST)[1], want[1])
        assert not set(sharded.binary.search(queries, K)[1].ravel().tolist()) & gone
    finally:
        sharded.delete_files()
        catalog.close()


@pytest.mark.slow
def test_auto_shards_answer_flat_until_their_partition_crosses_the_threshold(tmp_path, pg_url, ray_session):
    catalog = PostgresCatalog(pg_url)
    spec = IndexSpec("auto", nlist=NLIST)
    collection = Collection("a", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 5.0, index_spec=spec)
    catalog.create_collection(collection)
    rng = np.random.default_rng(8)
    _insert(catalog, "a", rng, [f"i{n}" for n in range(160)])  # 12,800 windows: ~6,400 per shard
    sharded = _open(pg_url, tmp_path, collection, auto_windows=11_000)  # counted per shard
    try:
        found = sharded.describe_index()
        assert found["answering"] == "flat" and found["trains_at"] == 11_000, found
        assert [s["answering"] for s in found["shards"]] == ["flat", "flat"]
        queries = rng.integers(0, 256, (6, BITS // 8), dtype=np.uint8)
        assert np.array_equal(sharded.binary.search(queries, K, nprobe=1)[1], _brute_force(catalog, "a", queries, K)[1])

        _insert(catalog, "a", rng, [f"j{n}" for n in range(200)])  # 28,800 windows: every shard past 11,000
        sharded.catch_up(catalog)
        sharded.binary.search(queries, K)  # the shards replay on their next call, and start training
        found = _wait_answering(sharded, "ivf")
        assert all(s["windows"] >= 11_000 and s["nlist"] == NLIST for s in found["shards"]), found
        want = _brute_force(catalog, "a", queries, K)
        got = sharded.binary.search(queries, K, nprobe=NLIST)
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[0], want[0])
    finally:
        sharded.delete_files()
        catalog.close()


@pytest.mark.slow
def test_http_shows_each_shards_index_and_takes_a_query_nprobe(tmp_path, pg_url, ray_session):
    """Through the API on Ray shards: GET /v1/collections/{name} lists each shard's index, and a search's
    nprobe reaches the shards (at nlist the item distances are brute force's; at 1 they are not)."""
    from fastapi.testclient import TestClient

    from app.cluster.ray_runtime import NAMESPACE
    from app.cluster.remote_index import catalog_prefix
    from app.main import create_app
    from tests.conftest import make_settings

    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=2,
                             cluster={"shard_timeout_s": 60.0})
    catalog = PostgresCatalog(pg_url)
    try:
        with TestClient(create_app(settings)) as client:
            created = client.post("/v1/collections", json={"name": "h", "modality": "audio",
                                                           "index": {"kind": "ivf", "nlist": NLIST, "nprobe": 1}})
            assert created.status_code == 201, created.text
            body = created.json()
            dim, bits = body["dim"], body["bits"]
            index = body["index"]
            assert index["answering"] == "flat" and index["trains_at"] == 10_000, index
            assert [(s["shard"], s["answering"]) for s in index["shards"]] == [(1, "flat"), (2, "flat")]

            rng = np.random.default_rng(3)
            names = [f"i{n}" for n in range(300)]
            for start in range(0, len(names), 50):
                catalog.upsert_items("h", [
                    NewItem(name, None, None, None, {}, np.zeros((WINDOWS, 2)),
                            l2_normalise(rng.standard_normal((WINDOWS, dim)).astype(np.float32)),
                            rng.integers(0, 256, (WINDOWS, bits // 8), dtype=np.uint8))
                    for name in names[start:start + 50]])
            probes = [f"q{n}" for n in range(6)]  # one window each: an item's distance is its nearest window's
            catalog.upsert_items("h", [
                NewItem(name, None, None, None, {}, np.zeros((1, 2)),
                        l2_normalise(rng.standard_normal((1, dim)).astype(np.float32)),
                        rng.integers(0, 256, (1, bits // 8), dtype=np.uint8)) for name in probes])

            deadline = time.time() + 180
            while True:
                index = client.get("/v1/collections/h").json()["index"]
                if index["answering"] == "ivf" and not index["building"] or time.time() > deadline:
                    break
                time.sleep(0.5)
            assert index["answering"] == "ivf" and [s["answering"] for s in index["shards"]] == ["ivf", "ivf"], index
            assert sum(s["windows"] for s in index["shards"]) == 300 * WINDOWS + len(probes)
            assert index["setting"]["nlist"] == NLIST and index["nprobe"] == 1

            parts = list(catalog.iter_segments("h", dim, bits))
            seg_ids = np.concatenate([p[0] for p in parts])
            unpacked = np.unpackbits(np.concatenate([p[2] for p in parts]), axis=1)
            owner = catalog.segment_items("h", seg_ids)
            differs = 0
            for probe in probes:
                code = catalog.item_segments("h", probe, dim, bits)[3][0]
                distances = (unpacked != np.unpackbits(code)[None, :]).sum(axis=1)
                nearest: dict[str, int] = {}
                for sid, d in zip(seg_ids.tolist(), distances.tolist()):
                    item = owner[sid][0]
                    if item != probe:
                        nearest[item] = min(d, nearest.get(item, d))
                want = sorted(nearest.values())[:K]
                got = {}
                for nprobe in (NLIST, 1):
                    response = client.post("/v1/collections/h/search", json={"item_id": probe, "mode": "binary",
                                                                             "k": K, "nprobe": nprobe})
                    assert response.status_code == 200, response.text
                    got[nprobe] = [r["distance"] for r in response.json()["results"]]
                assert got[NLIST] == want, probe
                differs += got[1] != want
            assert differs > 0  # one list of 16 misses neighbours of random codes: the override did reach the shards
    finally:
        catalog.close()
        for actor in ray_session.util.list_named_actors(all_namespaces=True):
            if actor["name"].startswith(catalog_prefix(pg_url)):
                ray_session.kill(ray_session.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)


def test_the_report_says_mixed_while_shards_differ_and_names_a_missing_shard():
    from app.cluster.index_report import merge_shard_indices

    def stat(answering, windows, trained_on=None, error=None):
        index = {"kind": "auto", "answering": answering, "building": answering == "flat", "nlist": 16 if trained_on else None,
                 "nprobe": 2 if trained_on else None, "trains_at": 10_000, "trained_on": trained_on, "last_build_s": None}
        if error:
            index["last_error"] = error
        return {"segments": windows, "index": index}

    spec = IndexSpec("auto")
    found = merge_shard_indices(spec, [stat("ivf", 12_000, 11_000), stat("flat", 10_500, error="MemoryError: x"), None])
    assert found["answering"] == "mixed" and found["building"] and found["trained_on"] is None and found["nlist"] is None
    assert [(s["shard"], s["answering"]) for s in found["shards"]] == [(1, "ivf"), (2, "flat"), (3, None)]
    assert found["shards"][2]["unavailable"] and found["last_error"] == "shard 2: MemoryError: x"
    IndexPublic.model_validate({**found, "setting": spec.to_json()})
    both = merge_shard_indices(spec, [stat("ivf", 12_000, 11_000), stat("ivf", 12_500, 11_900)])
    assert both["answering"] == "ivf" and both["trained_on"] == 22_900 and both["nlist"] == 16 and not both["building"]
    assert merge_shard_indices(IndexSpec("flat"), [{"segments": 3, "index": None}]) is None  # float only: nothing to say


def test_the_shards_live_recall_is_listed_per_shard_and_merged_by_queries():
    from app.cluster.index_report import merge_shard_indices

    def stat(recall):
        index = {"kind": "ivf", "answering": "ivf", "building": False, "nlist": 16, "nprobe": 2, "trains_at": 0,
                 "trained_on": 1_000, "last_build_s": 1.0, "recall": recall}
        return {"segments": 1_000, "index": index}

    first = {"recall_at_10": 0.9, "queries": 30, "skipped": 1, "nprobes": [4], "measured_at": 200.0, "busy_s": 0.5, "seconds": 10.0}
    second = {"recall_at_10": 0.6, "queries": 10, "skipped": 0, "nprobes": None, "measured_at": 100.0, "busy_s": 0.25, "seconds": 12.0}
    merged = merge_shard_indices(IndexSpec("ivf"), [stat(first), stat(second), stat(None)])
    # by hand: (0.9 * 30 + 0.6 * 10) / 40 = 0.825; the oldest measurement; sums of samples and time
    assert merged["recall"]["recall_at_10"] == pytest.approx(0.825)
    assert (merged["recall"]["queries"], merged["recall"]["skipped"], merged["recall"]["measured_at"]) == (40, 1, 100.0)
    assert merged["recall"]["nprobes"] == [4] and merged["recall"]["busy_s"] == pytest.approx(0.75)
    assert [s.get("recall") for s in merged["shards"]] == [first, second, None]
    IndexPublic.model_validate({**merged, "setting": IndexSpec("ivf").to_json()})
    assert merge_shard_indices(IndexSpec("ivf"), [stat(None)])["recall"] is None  # nothing measured yet
