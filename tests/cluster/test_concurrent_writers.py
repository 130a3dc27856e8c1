"""Two API replicas ingesting the same item ids at the same moment: the catalog's order decides.

Two services (each its own catalog connection, the same PostgreSQL, the same Ray shard actors, one
media folder) ingest the same 16 ids at once, each with its own recording per id, in opposite
orders so that the writes of one id meet in the middle. Every ingest is acknowledged; afterwards
each id holds exactly one of the two recordings, whole (no mix of windows), and it is the one whose
write came last in the catalog's order: its sequence number is the item's, and that write replaced
the other's windows (their tombstones carry its number). Both replicas answer alike, and the checker
(app/cluster/consistency.py) finds every shard equal to the catalog.
"""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient

from app.cluster.consistency import check_shards
from app.cluster.remote_index import RemoteCollectionIndex
from app.main import create_app
from app.storage.postgres import PostgresCatalog
from tests.conftest import make_settings, tone_wav

IDS = [f"x{n}" for n in range(16)]
SECONDS = 1.5  # two windows (1 s, hop 0.5 s) per recording


def _found_exactly(client, clip: bytes, item_id: str) -> bool:
    results = client.post("/v1/collections/w/search", files={"file": ("q.wav", clip)},
                          data={"k": "1", "mode": "float"}).json()["results"]
    return bool(results) and results[0]["id"] == item_id and results[0]["distance"] < 1e-4


@pytest.mark.slow
def test_two_replicas_writing_the_same_ids_at_once_end_as_the_catalog_orders(tmp_path, pg_url, ray_session):
    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=2,
                             cluster={"shard_timeout_s": 60.0})
    clips = {"a": {i: tone_wav(300.0 + 37 * n, seconds=SECONDS) for n, i in enumerate(IDS)},
             "b": {i: tone_wav(1500.0 + 41 * n, seconds=SECONDS) for n, i in enumerate(IDS)}}
    with TestClient(create_app(settings)) as a, TestClient(create_app(settings)) as b:
        assert a.post("/v1/collections", json={"name": "w", "modality": "audio"}).status_code == 201
        start = threading.Barrier(2)
        answers: dict[str, list[int]] = {"a": [], "b": []}

        def write(client, name: str, order: list[str]) -> None:
            start.wait()
            for item_id in order:
                response = client.post("/v1/collections/w/items", files={"files": (f"{item_id}.wav", clips[name][item_id])},
                                       data={"ids": item_id, "metadata": f'{{"writer": "{name}"}}'})
                answers[name].append(response.status_code)

        threads = [threading.Thread(target=write, args=(a, "a", IDS)),
                   threading.Thread(target=write, args=(b, "b", IDS[::-1]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == {"a": [200] * len(IDS), "b": [200] * len(IDS)}

        catalog = PostgresCatalog(pg_url)
        winners = {}
        for item_id in IDS:
            item = catalog._one("SELECT seq, metadata FROM items WHERE collection = 'w' AND id = ?", (item_id,))
            seqs = {int(r[0]) for r in catalog._rows("SELECT seq FROM segments WHERE collection = 'w' AND item_id = ?", (item_id,))}
            replaced = catalog._one("SELECT COUNT(*) FROM tombstones WHERE collection = 'w' AND seq = ?", (item["seq"],))[0]
            # one whole version: every window from the item's own write, which replaced the other's two windows
            assert seqs == {int(item["seq"])} and replaced == 2, (item_id, seqs, replaced)
            winner = "a" if '"a"' in item["metadata"] else "b"
            loser = "b" if winner == "a" else "a"
            winners[item_id] = winner
            for client in (a, b):  # both replicas: the winner's recording finds it exactly, the loser's does not
                assert _found_exactly(client, clips[winner][item_id], item_id), (item_id, winner)
                assert not _found_exactly(client, clips[loser][item_id], item_id), (item_id, loser)
        for client in (a, b):
            stats = client.get("/v1/collections/w").json()
            assert stats["items"] == len(IDS) and stats["segments"] == stats["indexed_segments"] == 2 * len(IDS), stats
        shards = RemoteCollectionIndex.open(catalog.get_collection("w"), settings)
        assert check_shards(catalog, shards) == []
        a.delete("/v1/collections/w")
        catalog.close()
