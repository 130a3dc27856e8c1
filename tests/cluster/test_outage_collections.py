"""Creating and deleting a sharded collection while the Ray head is lost, and shard actors left behind.

On the session's Ray, which stays up: the head watch's mark (app/cluster/ray_runtime.mark_head_lost) is set by
hand, as a failed probe sets it, so these run in seconds; tests/cluster/test_head_outage.py does the same
requests against a head really killed (once) and restarted. Contract: a create or delete of a sharded
collection while the head is lost answers 503 ray_unavailable with Retry-After and changes nothing; a create
whose shards cannot be opened takes its catalog row back (the name stays free); shard actors whose collection
the catalog no longer has are retired, snapshots first (app/cluster/shard_lifecycle.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from app.cluster import ray_runtime
from app.cluster.ray_runtime import NAMESPACE
from app.cluster.remote_index import RemoteCollectionIndex, actor_name, catalog_prefix
from app.cluster.shard_actor import snapshot_folder
from app.cluster.shard_lifecycle import orphan_shards, sweep_orphan_shards
from app.encoders.base import l2_normalise, sign_codes
from app.settings import Settings
from app.storage.postgres import PostgresCatalog
from app.storage.records import Collection, NewItem

DIM, BITS = 16, 16


def _items(rng, names):
    out = []
    for name in names:
        raw = rng.standard_normal((2, DIM)).astype(np.float32)
        out.append(NewItem(name, None, None, None, {}, np.zeros((2, 2)), l2_normalise(raw), sign_codes(raw)))
    return out


def _shard_names(ray, catalog_url: str, collection: str | None = None) -> set[str]:
    prefix = catalog_prefix(catalog_url) + (f"{collection}:" if collection else "")
    return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == NAMESPACE and a["name"].startswith(prefix)}


def _assert_ray_503(answer) -> None:
    assert answer.status_code == 503, (answer.status_code, answer.text)
    assert answer.headers.get("retry-after") == str(ray_runtime.RETRY_AFTER_S)
    assert answer.json()["error"]["code"] == "ray_unavailable", answer.text


def test_orphans_are_the_shards_of_this_catalog_whose_collection_is_gone():
    url = "postgresql://u:p@db:5432/recall"
    kept = Collection("a", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 5.25)
    recreated = Collection("b", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 9.0)
    names = [actor_name(url, kept, 0, 2), actor_name(url, kept, 1, 2), actor_name(url, kept, 0, 4),
             actor_name(url, Collection("b", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 7.0), 0, 1),
             actor_name(url, Collection("a.b", "audio", "x", ("binary",), DIM, BITS, 1.0, 0.5, False, "", 5.25), 0, 1),
             actor_name("postgresql://u:p@other:5432/recall", Collection("z", "audio", "x", ("binary",), DIM, BITS,
                                                                         1.0, 0.5, False, "", 1.0), 0, 1),
             "embed:owner:0"]
    # the old "b" (created at 7.0, since recreated) and "a.b" are orphans; another catalog's shard and a worker are not ours
    assert orphan_shards(names, url, [kept, recreated]) == sorted([names[3], names[4]])
    assert orphan_shards(names, url, []) == sorted(names[:5])


@pytest.mark.slow
def test_the_sweep_retires_the_shards_of_a_deleted_collection_and_their_snapshots(tmp_path, pg_url, ray_session):
    ray = ray_session
    catalog = PostgresCatalog(pg_url)
    rng = np.random.default_rng(3)
    settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=2,
                        cluster={"shard_snapshot_dir": tmp_path / "snaps", "shard_snapshot_s": 3600.0})
    opened = {}
    for name, created in (("keep", 5.0), ("gone", 6.0)):
        collection = Collection(name, "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", created)
        catalog.create_collection(collection)
        catalog.upsert_items(name, _items(rng, [f"{name}{n}" for n in range(12)]))
        opened[name] = RemoteCollectionIndex.open(collection, settings)
        ray.get([actor.snapshot.remote() for actor in opened[name].actors])
    folders = {name: [snapshot_folder(str(tmp_path / "snaps"), actor_name(pg_url, ix.collection, n, 2)) for n in range(2)]
               for name, ix in opened.items()}
    assert all(f.is_dir() for fs in folders.values() for f in fs)

    # "gone" deleted in the catalog by a delete whose shard cleanup never reached Ray (its head lost in between)
    catalog.delete_collection("gone")
    assert ray_runtime.head_lost() is False
    swept = sweep_orphan_shards(catalog, pg_url)
    assert swept == sorted(actor_name(pg_url, opened["gone"].collection, n, 2) for n in range(2))
    assert _shard_names(ray, pg_url, "gone") == set()
    assert not any(f.exists() for f in folders["gone"])
    # the live collection is untouched: its shards answer and keep their snapshots
    assert len(_shard_names(ray, pg_url, "keep")) == 2 and all(f.is_dir() for f in folders["keep"])
    assert sum(s["segments"] for s in opened["keep"].shard_stats()) == 24
    assert sweep_orphan_shards(catalog, pg_url) == []

    # with the head lost nothing is asked of Ray (listing named actors goes through the head)
    catalog.delete_collection("keep")
    ray_runtime.mark_head_lost(True)
    try:
        assert sweep_orphan_shards(catalog, pg_url) == []
    finally:
        ray_runtime.mark_head_lost(False)
    assert len(_shard_names(ray, pg_url, "keep")) == 2
    catalog.close()


@pytest.mark.slow
def test_create_and_delete_of_a_sharded_collection_with_the_head_lost_answer_503_and_change_nothing(tmp_path, pg_url,
                                                                                                     ray_session):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings

    ray = ray_session
    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=1)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "here", "modality": "audio"}).status_code == 201
        ray_runtime.mark_head_lost(True)  # as the head watch's first failed probe does
        try:
            _assert_ray_503(client.post("/v1/collections", json={"name": "new", "modality": "audio"}))
            _assert_ray_503(client.delete("/v1/collections/here"))
            # nothing changed: "here" listed with its shard, "new" neither in the catalog nor listed
            assert [c["name"] for c in client.get("/v1/collections").json()["data"]] == ["here"]
            assert client.get("/v1/collections/new").status_code == 404
            assert len(_shard_names(ray, pg_url, "here")) == 1
        finally:
            ray_runtime.mark_head_lost(False)
        catalog = PostgresCatalog(pg_url)
        try:
            assert [c.name for c in catalog.list_collections()] == ["here"]
        finally:
            catalog.close()
        # the head back: the name is free, the refused delete goes through, and its shard goes with it
        assert client.post("/v1/collections", json={"name": "new", "modality": "audio"}).status_code == 201
        assert client.delete("/v1/collections/here").status_code == 204
        assert _shard_names(ray, pg_url, "here") == set()
        assert client.get("/v1/collections/here").status_code == 404
        assert [c["name"] for c in client.get("/v1/collections").json()["data"]] == ["new"]


@pytest.mark.slow
def test_a_create_whose_shards_cannot_be_opened_takes_its_catalog_row_back(tmp_path, pg_url, ray_session, monkeypatch):
    """The head lost after the create's check, or a shard that fails its first sync: the row and any actor made go."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings

    ray = ray_session
    real_call = RemoteCollectionIndex._call

    def first_sync_fails(self, method, *args, timeout=None, strict=False):
        if method == "sync" and strict:  # RemoteCollectionIndex.open's wait for the partitions, after the actors exist
            raise self._unavailable([(0, "did not answer in time")])
        return real_call(self, method, *args, timeout=timeout, strict=strict)

    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=2)
    with TestClient(create_app(settings)) as client:
        monkeypatch.setattr(RemoteCollectionIndex, "_call", first_sync_fails)
        answer = client.post("/v1/collections", json={"name": "half", "modality": "audio"})
        assert answer.status_code == 503 and answer.headers.get("retry-after") == "2", answer.text
        assert answer.json()["error"]["details"]["missing_shards"] == [1]
        assert _shard_names(ray, pg_url, "half") == set()  # the two actors it made were retired
        assert client.get("/v1/collections/half").status_code == 404
        monkeypatch.setattr(RemoteCollectionIndex, "_call", real_call)
        created = client.post("/v1/collections", json={"name": "half", "modality": "audio"})
        assert created.status_code == 201, created.text
        assert len(_shard_names(ray, pg_url, "half")) == 2
