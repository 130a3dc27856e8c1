"""A collection no Ray node has room for, and a request arriving while another collection is being opened.

Found by the cluster fuzz (bench.reliability.fuzz --cluster): its collections' detached shard actors filled the
head's CPUs, the next collection's actors waited unplaced, its opening waited 30 minutes for their first sync
while holding the lock every request takes first, and every route of the process, /healthz included, timed out.
Contract now: a collection whose new shard actors need more CPU than the cluster has free is refused at once
(503 cluster_full, Retry-After, no catalog row, no actor left), and a request that would wait more than
SYNC_WAIT_S behind another collection's opening answers 503 collection_opening instead of stalling the loop.
"""

from __future__ import annotations

import threading
import time

import pytest

from app.cluster.remote_index import ClusterFull, RemoteCollectionIndex, actor_name
from app.settings import Settings
from app.storage.postgres import PostgresCatalog
from app.storage.records import Collection
from app.usecases import follower
from app.usecases.services import Services


def _collection(name: str) -> Collection:
    return Collection(name, "audio", "x", ("binary", "float"), 16, 16, 1.0, 0.5, False, "", time.time())


def test_a_collection_the_cluster_has_no_room_for_is_refused_at_once(pg_url, ray_session):
    ray = ray_session
    free = ray.available_resources().get("CPU", 0.0)
    settings = Settings(catalog_url=pg_url, ray_address="auto", index_shards=2, cluster={"shard_cpus": free})
    collection = _collection("toobig")
    PostgresCatalog(pg_url).create_collection(collection)
    started = time.monotonic()
    with pytest.raises(ClusterFull) as refused:
        RemoteCollectionIndex.open(collection, settings)  # 2 shards of `free` CPU each: one more than there is
    assert time.monotonic() - started < 10  # not the 30 minutes of the first sync's timeout
    error = refused.value
    assert (error.status_code, error.code, error.headers["Retry-After"]) == (503, "cluster_full", "30")
    assert "cluster.shard_cpus" in error.message
    names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)}
    assert not {actor_name(pg_url, collection, n, 2) for n in range(2)} & names  # nothing was started


def test_a_request_behind_a_long_opening_answers_503_instead_of_waiting(tmp_path, pg_url, monkeypatch):
    monkeypatch.setattr(follower, "SYNC_WAIT_S", 0.3)
    services = Services(Settings(data_dir=tmp_path, catalog_url=pg_url, ray_address="auto"))
    held = threading.Event()

    def long_opening() -> None:
        with services.open_gate.collection("anything", None):  # what the follower holds while its shards build
            held.set()
            time.sleep(2.0)

    opener = threading.Thread(target=long_opening)
    opener.start()
    held.wait(5)
    started = time.monotonic()
    with pytest.raises(follower.CollectionOpening) as refused:
        services.state("anything")
    assert time.monotonic() - started < 1.5
    assert (refused.value.status_code, refused.value.code, refused.value.headers["Retry-After"]) == (503, "collection_opening", "2")
    started = time.monotonic()
    with pytest.raises(Exception) as other:  # another collection's requests do not wait for this opening
        services.state("another")
    assert getattr(other.value, "status_code", None) == 404 and time.monotonic() - started < 0.25
    opener.join()
    with pytest.raises(Exception) as missing:  # the lock free again: the usual answer for an unknown name
        services.state("anything")
    assert getattr(missing.value, "status_code", None) == 404
