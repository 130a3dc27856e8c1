"""Index shards as Ray actors: scatter/merge equals one index, ties included; a killed shard
is restarted and rebuilt from the catalog, and search says 503 (never a short list) meanwhile.

One local Ray for the session (tests/conftest.py), 2 CPUs.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cluster.ray_runtime import NAMESPACE
from app.cluster.remote_index import RemoteCollectionIndex, actor_name
from app.cluster.topk import ordered_topk
from app.encoders.base import l2_normalise, sign_codes
from app.errors import Unhealthy
from app.index import BinaryIndex, FloatIndex
from app.index.exact import hamming_distances, inner_products
from app.main import create_app
from app.settings import Settings
from app.storage.index_store import CollectionIndex
from app.storage.migrations import shard_key
from app.storage.postgres import PostgresCatalog
from app.storage.records import Collection, NewItem
from tests.conftest import make_settings, tone_wav

DIM, BITS = 16, 16  # 16-bit codes: Hamming ties everywhere, which is the point


def _reference(codes_or_floats: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int, binary: bool) -> list[list[int]]:
    """Brute force under the documented rule: (distance asc | similarity desc, segment id asc)."""
    scores = hamming_distances(queries, codes_or_floats) if binary else -inner_products(queries, codes_or_floats)
    return [[int(ids[j]) for j in np.lexsort((ids, row))[:k]] for row in scores]


@pytest.mark.slow
def test_sharded_search_equals_one_index_ties_included(pg_url, ray_session):
    catalog = PostgresCatalog(pg_url)
    collection = Collection("c", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 1.0)
    catalog.create_collection(collection)
    rng = np.random.default_rng(7)
    items = []
    for i in range(120):
        raw = rng.standard_normal((1 + i % 4, DIM)).astype(np.float32)
        items.append(NewItem(f"item-{i}", None, None, None, {}, np.zeros((len(raw), 2)), l2_normalise(raw), sign_codes(raw)))
    catalog.upsert_items("c", items)
    catalog.delete_item("c", "item-3")
    one = CollectionIndex.build(collection, catalog, shards=1)
    ids = one.binary.ids()
    codes, floats = one.binary.reconstruct(ids), one.float.reconstruct(ids)
    raw_q = rng.standard_normal((6, DIM)).astype(np.float32)
    queries = {"binary": sign_codes(raw_q), "float": l2_normalise(raw_q)}
    for count in (2, 3):
        settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=count)
        sharded = RemoteCollectionIndex.open(collection, settings)
        sharded.catch_up(catalog)
        assert len(sharded) == len(one) == len(ids)
        sizes = [s["segments"] for s in sharded.shard_stats()]
        assert len(sizes) == count and sum(sizes) == len(ids) and min(sizes) > 0
        for kind, cls in (("binary", BinaryIndex), ("float", FloatIndex)):
            q = queries[kind]
            for k in (1, 5, 17, len(ids) + 3):
                got_scores, got_ids = getattr(sharded, kind).search(q, k)
                want_scores, want_ids = ordered_topk(getattr(one, kind), q, k, cls.ASCENDING, cls.PAD_VALUE)
                assert np.array_equal(got_ids, want_ids), (kind, k, count)
                assert np.array_equal(got_scores, want_scores)
                reference = _reference(codes if kind == "binary" else floats, ids, q, k, kind == "binary")
                assert [row[row >= 0].tolist() for row in got_ids] == reference
        # reconstruct answers from whichever shard holds each id
        pick = ids[::7]
        assert np.array_equal(sharded.float.reconstruct(pick), one.float.reconstruct(pick))
        sharded.delete_files()

    # a shard that is gone for good (not restarting): the search fails naming it, never a short list
    import ray

    sharded = RemoteCollectionIndex.open(collection, Settings(catalog_url=pg_url, ray_address="auto", index_shards=3))
    ray.kill(sharded.actors[1], no_restart=True)
    _wait_dead(sharded.actors[1])  # the kill is asynchronous: a call sent at once may still be answered
    since = time.monotonic()
    short = sharded.binary.search(queries["binary"], 5)  # the other shards' answer, recorded as short
    with pytest.raises(Unhealthy, match="index shard 2 of 3 of collection 'c' is unavailable"):
        sharded.shards_missed(since, time.monotonic(), allow_partial=False)
    assert sharded.shards_missed(since, time.monotonic(), allow_partial=True)["missing_shards"] == [2]
    assert sharded.shards_missed(time.monotonic(), time.monotonic() + 1, allow_partial=False) is None  # later calls: clean
    assert short[1].shape == (len(queries["binary"]), 5)
    again = RemoteCollectionIndex.open(collection, Settings(catalog_url=pg_url, ray_address="auto", index_shards=3))
    again.catch_up(catalog)
    want = ordered_topk(one.binary, queries["binary"], 5, BinaryIndex.ASCENDING, BinaryIndex.PAD_VALUE)
    assert np.array_equal(again.binary.search(queries["binary"], 5)[1], want[1])  # recreated, rebuilt from the catalog
    again.delete_files()


def _wait_dead(actor, seconds: float = 30.0) -> None:
    import ray

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=5)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def _seed(client, n=12):
    client.post("/v1/collections", json={"name": "t", "modality": "audio"})
    clips = {f"tone-{i}": tone_wav(200.0 + 61 * i, seconds=1.5) for i in range(n)}
    files = [("files", (f"{name}.wav", data)) for name, data in clips.items()]
    response = client.post("/v1/collections/t/items", files=files, data={"ids": ",".join(clips)})
    assert response.status_code == 200, response.text
    return clips


def _search(client, clip, mode, k=5):
    return client.post("/v1/collections/t/search", files={"file": ("q.wav", clip)}, data={"k": str(k), "mode": mode})


@pytest.mark.slow
def test_ray_shards_serve_the_api_and_survive_a_killed_shard(tmp_path, pg_url, ray_session):
    import ray

    sharded = make_settings(tmp_path / "r", catalog_url=pg_url, ray_address="auto", index_shards=2)
    in_process = make_settings(tmp_path / "p", catalog_url=pg_url)
    with TestClient(create_app(sharded)) as client, TestClient(create_app(in_process)) as plain:
        clips = _seed(client)
        probes = [clips["tone-2"], clips["tone-9"], tone_wav(333.0, seconds=1.0)]
        expected = {}
        for mode in ("binary", "float", "two_stage"):
            for n, probe in enumerate(probes):
                got = _search(client, probe, mode).json()["results"]
                # the same data searched by one in-process index (same catalog, no Ray)
                want = _search(plain, probe, mode).json()["results"]
                assert [(r["id"], r["distance"]) for r in got] == [(r["id"], r["distance"]) for r in want], mode
                expected[mode, n] = [r["id"] for r in got]
        assert expected["float", 0][0] == "tone-2" and expected["binary", 1][0] == "tone-9"

        # a write through the in-process API is seen by the sharded one at once (shards replay the catalog)
        plain.post("/v1/collections/t/items", files={"files": ("x.wav", tone_wav(1234.0, seconds=1.5))}, data={"ids": "late"})
        assert _search(client, tone_wav(1234.0, seconds=1.5), "float", k=1).json()["results"][0]["id"] == "late"
        expected = {key: [r["id"] for r in _search(client, probes[key[1]], key[0]).json()["results"]] for key in expected}

        # kill one shard actor while searches stream in: every answer is complete or a 503 with a reason
        collection = PostgresCatalog(pg_url).get_collection("t")
        victim = ray.get_actor(actor_name(pg_url, collection, 1, 2), namespace=NAMESPACE)
        old_pid = ray.get(victim.pid.remote())
        outcomes: list[tuple[int, object]] = []
        stop = threading.Event()

        def stream() -> None:
            while not stop.is_set():
                for key in expected:
                    response = _search(client, probes[key[1]], key[0])
                    body = response.json()
                    outcomes.append((response.status_code, body))
                    if response.status_code == 200:
                        assert [r["id"] for r in body["results"]] == expected[key], key
                    else:
                        assert response.status_code == 503 and body["error"]["code"] == "unavailable", body
                        assert "index shard 2 of 2" in body["error"]["message"]

        thread = threading.Thread(target=stream)
        thread.start()
        time.sleep(0.5)
        ray.kill(victim, no_restart=False)  # Ray restarts it: from its snapshot if it wrote one yet, else PostgreSQL
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if ray.get(victim.pid.remote(), timeout=5) != old_pid:
                    break
            except Exception:  # noqa: BLE001 - still restarting
                pass
            time.sleep(0.2)
        # the restarted actor answers its pid before it has rebuilt its partition from PostgreSQL:
        # keep searching until an answer that started after the restart comes back whole (bounded),
        # not for a fixed half second. A 200 from before the kill or the restart does not count: the
        # next search could still reach the rebuilding shard (the stream is sequential, so once one
        # search after the restart is whole, every later one is)
        restarted_at = len(outcomes) + 1  # the search in flight now may have started before the restart
        recovered_by = time.time() + 30
        while time.time() < recovered_by and not any(code == 200 for code, _ in outcomes[restarted_at:]):
            time.sleep(0.1)
        stop.set()
        thread.join()
        assert ray.get(victim.pid.remote()) != old_pid
        assert outcomes and outcomes[-1][0] == 200
        for key in expected:  # recovered, with the same answers
            assert [r["id"] for r in _search(client, probes[key[1]], key[0]).json()["results"]] == expected[key]

        # a shard gone for good: 503 naming it, or on request the other shard's results marked partial
        everything = [r["id"] for r in _search(client, probes[0], "float", k=20).json()["results"]]
        ray.kill(victim, no_restart=True)
        _wait_dead(victim)
        refused = _search(client, probes[0], "float")
        assert refused.status_code == 503 and refused.json()["error"]["details"]["missing_shards"] == [2]
        partial = client.post("/v1/collections/t/search", files={"file": ("q.wav", probes[0])},
                              data={"k": "5", "mode": "float", "partial": "true"})
        assert partial.status_code == 200, partial.text
        body = partial.json()
        assert body["partial"]["missing_shards"] == [2] and body["partial"]["shards"] == 2
        on_first_shard = [i for i in everything if shard_key(i) % 2 == 0]
        assert [r["id"] for r in body["results"]] == on_first_shard[:5]  # exactly the answering shard's ranking
        assert "partial" not in _search(plain, probes[0], "float").json()  # in-process: never partial
        client.delete("/v1/collections/t")


@pytest.mark.slow
def test_ingest_encodes_on_ray_workers_and_survives_a_killed_worker(tmp_path, pg_url, ray_session):
    import ray

    from app.encoders.registry import create_encoder, discover
    from app.features.windows import cut_windows
    from app.media.audio import decode_audio

    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=1,
                             cluster={"embed_workers": 2, "embed_cpus": 0.5}, batching={"max_batch_size": 4})
    local = create_encoder("audio-baseline", discover(), "cpu")
    clips = {f"w{i}": tone_wav(150.0 + 97 * i, seconds=3.0) for i in range(8)}
    with TestClient(create_app(settings)) as client:
        client.post("/v1/collections", json={"name": "e", "modality": "audio"})
        files = [("files", (f"{n}.wav", data)) for n, data in clips.items()]
        first = client.post("/v1/collections/e/items", files=files[:4], data={"ids": ",".join(list(clips)[:4])})
        assert first.status_code == 200, first.text
        # kill one worker while the second batch is being encoded: Ray restarts it and retries its batches
        outcome = {}

        def second() -> None:
            outcome["r"] = client.post("/v1/collections/e/items", files=files[4:], data={"ids": ",".join(list(clips)[4:])})

        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("embed:")]
        assert len(names) == 2
        # one ingest of 4 files (20 windows, batches of 4) kept both workers busy
        assert all(ray.get(ray.get_actor(n, namespace=NAMESPACE).where.remote())["batches"] > 0 for n in names)
        victim = ray.get_actor(names[0], namespace=NAMESPACE)
        old_pid = ray.get(victim.where.remote())["pid"]
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.05)
        ray.kill(victim, no_restart=False)
        thread.join()
        assert ray.get(victim.where.remote(), timeout=60)["pid"] != old_pid  # restarted
        catalog = PostgresCatalog(pg_url)
        # the killed worker's batches were retried on its restarted self (max_task_retries): the ingest succeeds
        assert outcome["r"].status_code == 200, outcome["r"].text
        acknowledged = [r["id"] for r in first.json()["indexed"] + outcome["r"].json()["indexed"]]
        assert sorted(acknowledged) == sorted(clips) and catalog.counts("e")[0] == 8
        for item_id in acknowledged:
            wave = decode_audio(clips[item_id], target_rate=local.sample_rate, filename="x.wav")
            windows, _ = cut_windows(wave, local.sample_rate, 1.0, 0.5)
            want = local.encode(windows)
            _, _, floats, codes = catalog.item_segments("e", item_id, local.dim, local.bits)
            assert np.allclose(floats, want.floats, atol=1e-5) and np.array_equal(codes, want.codes)


@pytest.mark.slow
def test_reshard_builds_the_new_count_then_retires_the_old(pg_url, ray_session):
    from app.cluster.admin import _shard_actors, reshard

    catalog = PostgresCatalog(pg_url)
    collection = Collection("r", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 2.0)
    catalog.create_collection(collection)
    rng = np.random.default_rng(3)
    catalog.upsert_items("r", [NewItem(f"i{i}", None, None, None, {}, np.zeros((2, 2)), np.zeros((2, DIM), np.float32),
                                       sign_codes(rng.standard_normal((2, DIM)).astype(np.float32))) for i in range(30)])
    q = sign_codes(rng.standard_normal((3, DIM)).astype(np.float32))
    settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=3)
    before = RemoteCollectionIndex.open(collection, settings).binary.search(q, 7)
    report = reshard(settings, 2)
    assert _shard_actors(pg_url) == sorted(actor_name(pg_url, collection, n, 2) for n in range(2))
    assert len(report["killed"]) == 3
    after = RemoteCollectionIndex.open(collection, settings.model_copy(update={"index_shards": 2}))
    got = after.binary.search(q, 7)
    assert np.array_equal(got[0], before[0]) and np.array_equal(got[1], before[1])
    after.delete_files()


class _SlowShard:
    """A stand-in shard whose one method answers after ``delay`` seconds."""

    def ping(self, delay: float) -> str:
        time.sleep(delay)
        return "pong"


def test_a_shard_slower_than_the_configured_timeout_counts_as_missing(ray_session):
    collection = Collection("slow", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 1.0)
    assert Settings().cluster.shard_timeout_s == 10.0  # the service's default
    actor = ray_session.remote(_SlowShard).remote()
    ray_session.get(actor.ping.remote(0.0))  # started, so the timings below are the call's alone
    patient = RemoteCollectionIndex(collection, [actor], timeout_s=30.0)
    assert patient._call("ping", 1.0) == ["pong"]
    impatient = RemoteCollectionIndex(collection, [actor], timeout_s=0.2)
    since = time.monotonic()
    assert impatient._call("ping", 3.0) == [None]
    with pytest.raises(Unhealthy, match="index shard 1 of 1 of collection 'slow' did not answer in time"):
        impatient.shards_missed(since, time.monotonic(), allow_partial=False)
    ray_session.kill(actor)
