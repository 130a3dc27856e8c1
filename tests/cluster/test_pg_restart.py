"""PostgreSQL restarted under a running cluster service: nothing acknowledged is lost, the outage is a 503.

Its own PostgreSQL (fsync on, as deployed) so the session's shared server is never stopped; the API
with its index on two Ray shard actors (the session's local Ray). A stream of single-file ingests and a
stream of searches run while the server is shut down (``pg_ctl -m fast``, then ``-m immediate``: no
checkpoint, crash recovery on the next start) and started again. Every answer must be a 200 or a 503
in the one error shape with Retry-After (documented in the OpenAPI document); the same service, not
restarted, answers again once PostgreSQL is back; every acknowledged ingest is in the catalog and
found by search, and every shard holds exactly the catalog's rows (app/cluster/consistency.py).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cluster.consistency import check_shards
from app.cluster.remote_index import RemoteCollectionIndex
from app.main import create_app
from app.storage.postgres import CatalogUnavailable, PostgresCatalog
from app.storage.records import Collection, NewItem
from tests.cluster.pg_server import PgServer, available
from tests.conftest import end_shard_actors, make_settings, tone_wav


@pytest.fixture(scope="module")
def own_pg():
    if not available():
        pytest.skip("PostgreSQL binaries not usable")
    server = PgServer(durable=True).start()
    yield server
    server.stop()


class Stream(threading.Thread):
    """Calls ``send(n)`` until stopped; keeps (n, status, body (its error when refused), Retry-After, time) of every answer."""

    def __init__(self, send) -> None:
        super().__init__(daemon=True)
        self.send = send
        self.answers: list[tuple[int, int, dict | None, str | None, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            response = self.send(n)
            body = response.json()
            self.answers.append((n, response.status_code, body.get("error", body), response.headers.get("retry-after"),
                                 time.monotonic()))
            if response.status_code != 200:
                time.sleep(0.05)  # a client backing off (less than Retry-After says, to see the recovery soon)
            n += 1

    def ok_after(self, moment: float) -> int:
        return sum(1 for _, code, _, _, at in self.answers if code == 200 and at > moment)


def _wait(condition, seconds: float) -> None:
    deadline = time.time() + seconds
    while not condition() and time.time() < deadline:
        time.sleep(0.05)


@pytest.fixture
def own_pg_url(own_pg):
    """A database on this file's own PostgreSQL; the shard actors it gets end with the test."""
    url = own_pg.new_database()
    yield url
    end_shard_actors(url)


@pytest.mark.slow
def test_postgres_restarts_lose_no_acknowledged_write_and_answer_503_meanwhile(tmp_path, own_pg, own_pg_url, ray_session):
    url = own_pg_url
    settings = make_settings(tmp_path, catalog_url=url, ray_address="auto", index_shards=2,
                             cluster={"shard_timeout_s": 60.0})
    clips = {f"c{n}": tone_wav(150.0 + 13 * n, seconds=1.0) for n in range(400)}
    probe = tone_wav(2000.0, seconds=1.0)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "w", "modality": "audio"}).status_code == 201
        assert client.post("/v1/collections/w/items", files={"files": ("p.wav", probe)}, data={"ids": "probe"}).status_code == 200
        ingest = Stream(lambda n: client.post("/v1/collections/w/items", files={"files": (f"c{n}.wav", clips[f"c{n}"])},
                                              data={"ids": f"c{n}"}))
        search = Stream(lambda n: client.post("/v1/collections/w/search", files={"file": ("q.wav", probe)},
                                              data={"k": "3", "mode": "float"}))
        ingest.start()
        search.start()
        try:
            outages = []
            for mode in ("fast", "immediate"):
                _wait(lambda: len(ingest.answers) >= 5 + 10 * len(outages), 60)
                down = time.monotonic()
                own_pg.shut_down(mode)
                _wait(lambda: any(a[1] == 503 and a[4] > down for a in ingest.answers + search.answers), 10)
                time.sleep(0.5)  # an outage long enough for both streams to meet it
                own_pg.start_again()
                up = time.monotonic()
                outages.append((mode, down, up))
                # the same service recovers by itself: both streams succeed again without a restart
                _wait(lambda: ingest.ok_after(up) >= 3 and search.ok_after(up) >= 3, 60)
                assert ingest.ok_after(up) >= 3 and search.ok_after(up) >= 3, (mode, ingest.answers[-3:], search.answers[-3:])
        finally:
            ingest.halt.set()
            search.halt.set()
            ingest.join()
            search.join()

        refusals = [a for a in ingest.answers + search.answers if a[1] != 200]
        assert refusals, "no request met an outage"
        for n, code, error, retry_after, at in refusals:
            # a 503 in the one error shape with Retry-After, inside an outage (or the moment after it)
            assert code == 503 and retry_after is not None and int(retry_after) >= 1, (code, error)
            assert error["code"] in ("catalog_unavailable", "unavailable") and error["message"], error
            assert any(down <= at <= up + 5 for _, down, up in outages), (at, outages)
        # every search answered was whole: the probe first
        assert all(body["results"][0]["id"] == "probe" for _, code, body, _, _ in search.answers if code == 200)
        acknowledged = [f"c{n}" for n, code, _, _, _ in ingest.answers if code == 200]

        # nothing acknowledged lost: every one is in the catalog, searchable, and the shards agree with the catalog
        catalog = PostgresCatalog(url)
        stored = set(catalog.items_by_id("w", acknowledged))
        assert set(acknowledged) <= stored
        stats = client.get("/v1/collections/w").json()
        assert stats["segments"] == stats["indexed_segments"], stats
        for name in acknowledged[:: max(1, len(acknowledged) // 6)] + acknowledged[-1:]:
            hit = client.post("/v1/collections/w/search", files={"file": ("q.wav", clips[name])},
                              data={"k": "1", "mode": "float"}).json()["results"][0]
            assert hit["id"] == name and hit["distance"] < 1e-4
        shards = RemoteCollectionIndex.open(catalog.get_collection("w"), settings)  # the service's shard actors, by name
        assert check_shards(catalog, shards) == []
        client.delete("/v1/collections/w")
    catalog.close()


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_an_idle_catalog_connection_is_replaced_after_a_restart_and_an_outage_is_a_503(own_pg, mode):
    catalog = PostgresCatalog(own_pg.new_database())
    catalog.create_collection(Collection("c", "audio", "x", ("binary",), 16, 16, 1.0, 0.5, False, "", 1.0))
    item = NewItem("a", None, None, None, {}, np.zeros((1, 2)), np.zeros((1, 16), np.float32), np.zeros((1, 2), np.uint8))
    first = catalog.upsert_items("c", [item]).seq
    own_pg.shut_down(mode)
    try:
        for call in (lambda: catalog.last_seq("c"), lambda: catalog.upsert_items("c", [item])):
            with pytest.raises(CatalogUnavailable) as refused:
                call()
            assert refused.value.status_code == 503 and refused.value.headers == {"Retry-After": "2"}
    finally:
        own_pg.start_again()
    # the connection that sat through the restart is dead; the very first calls after it succeed all the same
    assert catalog.last_seq("c") == first  # the committed write survived the shutdown
    own_pg.shut_down(mode)
    own_pg.start_again()
    assert catalog.upsert_items("c", [item]).seq > first  # a transaction first, on the dead connection
    assert catalog.items_by_id("c", ["a"])["a"]["id"] == "a"
    catalog.close()
