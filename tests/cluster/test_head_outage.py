"""The Ray head away for longer than Ray lets a joined process live without it, then back.

Ray's core worker inside a process joined to a head ends that process (``std::_Exit``, "Failed to
connect to GCS within 60 seconds") once the head's GCS has been unreachable for
``gcs_rpc_server_reconnect_timeout_s``. Here that limit is 24 s instead of 60 (Ray reads it from
``RAY_gcs_rpc_server_reconnect_timeout_s``, and so does app/cluster/ray_runtime.gcs_timeout_s), so
the outage can outlast it in seconds: a bare Ray driver joined to the same head, beside the API
process, shows the limit biting at 24 s, while `recall serve` leaves the lost cluster in time
(app/cluster/head_watch.py), stays up answering 503 with Retry-After for what needs Ray and 200 for
catalog-only routes, and once the head is back rejoins it: every acknowledged item is found again,
and an ingest reopens the embedding worker on the new head. The same (single) outage also drives every
route of the sharded collection: create and delete answer 503 ray_unavailable and change nothing (the name
free, the collection deletable once the head is back, then gone with its shard actor and snapshot), an
item delete and an ingest job are accepted and take effect on the new head, none answers 500.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.cluster.ray_head import RAY, RayHead
from tests.cluster.serve import serve
from tests.conftest import tone_wav


GCS_TIMEOUT_S = 24  # Ray's limit on a lost head, shortened from 60 for both processes below
ROOT = Path(__file__).resolve().parents[2]

# a plain Ray driver, joined the way `recall serve` joins (app/cluster/ray_connect.init_ray), that does nothing more
BARE_DRIVER = """
import sys, time
from app.cluster.ray_connect import init_ray
from app.settings import ClusterSettings
init_ray(sys.argv[1], ClusterSettings(node_ip="127.0.0.1"), "bare-driver")
print("joined", flush=True)
time.sleep(3600)
"""

# lists the named actors of the head it joins (the embedding workers are named embed:<owner>:<n>)
LIST_ACTORS = """
import sys, ray
from app.cluster.ray_connect import init_ray
from app.settings import ClusterSettings
init_ray(sys.argv[1], ClusterSettings(node_ip="127.0.0.1"), "lister")
print(" ".join(sorted(a["name"] for a in ray.util.list_named_actors(all_namespaces=True))), flush=True)
"""


def _ray_free_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("RAY_")}, "HF_HUB_OFFLINE": "1", **extra}


def _search(url: str, clip: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/collections/w/search", files={"file": ("q.wav", clip)}, data={"k": "1", "mode": "float"},
                      timeout=60)


def _ingest(url: str, name: str, clip: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/collections/w/items", files={"files": (f"{name}.wav", clip)}, data={"ids": name}, timeout=120)


def _assert_retry_503(answer: httpx.Response, code: str | None = None) -> None:
    assert answer.status_code == 503, (answer.status_code, answer.text)
    assert answer.headers.get("retry-after") == "2", (answer.headers, answer.text)
    error = answer.json()["error"]  # the one JSON error shape
    assert set(error) >= {"code", "message"}, error
    if code is not None:
        assert error["code"] == code, error


@pytest.mark.slow
@pytest.mark.skipif(not RAY.is_file(), reason="the ray command is not installed")
def test_an_outage_longer_than_rays_limit_leaves_the_api_up_and_503_then_it_recovers(tmp_path, pg_url):
    head = RayHead(cpus=2).start()
    bare = None
    snaps = tmp_path / "snaps"
    try:
        api = serve(tmp_path / "data", pg_url, **head.env(), RECALL_INDEX_SHARDS="1",
                    RECALL_CLUSTER__EMBED_WORKERS="1", RECALL_CLUSTER__EMBED_CPUS="0.5",
                    RECALL_CLUSTER__SHARD_TIMEOUT_S="3",  # a search's wait for the lost shard, inside the gate's wait
                    RECALL_CLUSTER__SHARD_SNAPSHOT_DIR=str(snaps), RECALL_CLUSTER__SHARD_SNAPSHOT_S="1",
                    RAY_gcs_rpc_server_reconnect_timeout_s=str(GCS_TIMEOUT_S))
        try:
            bare_log = tmp_path / "bare-driver.log"
            with open(bare_log, "wb") as out:
                bare = subprocess.Popen([sys.executable, "-c", BARE_DRIVER, head.address], cwd=ROOT, stdout=out,
                                        stderr=subprocess.STDOUT, env=_ray_free_env(RAY_gcs_rpc_server_reconnect_timeout_s=str(GCS_TIMEOUT_S)))
            assert httpx.post(f"{api.url}/v1/collections", json={"name": "w", "modality": "audio"}, timeout=120).status_code == 201
            clips = {f"o{n}": tone_wav(260.0 + 113 * n, seconds=1.5) for n in range(4)}
            for name, clip in clips.items():  # encoded by the embedding worker on the head
                assert _ingest(api.url, name, clip).status_code == 200
            assert _search(api.url, clips["o2"]).json()["results"][0]["id"] == "o2"
            deadline = time.time() + 60
            while "joined" not in bare_log.read_text():
                assert bare.poll() is None and time.time() < deadline, bare_log.read_text()[-3000:]
                time.sleep(0.2)

            head.kill()
            killed = time.monotonic()
            acknowledged = dict(clips)
            searches, ingests = [], []
            # past Ray's limit by a margin: the bare driver has been ended by then, the API process has not
            while time.monotonic() - killed < GCS_TIMEOUT_S + 8:
                assert api.proc.poll() is None, "the API process ended while the head was away"
                searches.append(_search(api.url, clips["o2"]))
                name, clip = f"d{len(ingests)}", tone_wav(1500.0 + 37 * len(ingests), seconds=1.5)
                ingests.append(_ingest(api.url, name, clip))
                if ingests[-1].status_code == 200:  # encoded by a worker process outliving its head: acknowledged
                    acknowledged[name] = clip
                listed = httpx.get(f"{api.url}/v1/collections/w/items", params={"limit": 1000}, timeout=30)
                assert listed.status_code == 200, listed.text  # catalog only: still served
                assert {i["id"] for i in listed.json()["data"]} == set(acknowledged), listed.text
                if time.monotonic() - killed > 6:  # the head watch probes every 2 s
                    assert httpx.get(f"{api.url}/readyz", timeout=30).status_code == 503
                time.sleep(1.0)
            assert api.proc.poll() is None

            # Ray's limit is what ends a joined process: the bare driver is gone, with Ray's own message
            assert bare.poll() is not None and bare.returncode != 0, "the bare driver outlived Ray's limit"
            said = bare_log.read_text(errors="replace")
            assert f"Failed to connect to GCS within {GCS_TIMEOUT_S} seconds" in said, said[-3000:]
            # the API process left the lost cluster first (app/cluster/head_watch.leave)
            log = next(tmp_path.glob("serve-*.log")).read_text(errors="replace")
            assert "left the Ray cluster of" in log, log[-3000:]
            assert "Failed to connect to GCS" not in log

            # meanwhile: a search answered whole by a shard process outliving its head, else 503 with Retry-After;
            # an ingest needing the embedding worker: 503 ray_unavailable (nothing stored); never a 500
            for answer in searches:
                if answer.status_code == 200:
                    assert answer.json()["results"][0]["id"] == "o2"
                else:
                    _assert_retry_503(answer)
            assert searches[-1].status_code == 503  # past the disconnect no shard can answer
            for answer in ingests:
                if answer.status_code != 200:
                    _assert_retry_503(answer, "ray_unavailable")
            assert ingests[-1].status_code == 503
            assert ready_reasons_name_the_head(api.url, head.address)
            job = _collection_routes_while_the_head_is_away(api.url, acknowledged)

            head.proc.wait()
            head.start()  # the same address, a new (empty) Ray cluster
            deadline = time.time() + 120
            while httpx.get(f"{api.url}/readyz", timeout=30).status_code != 200 or _search(api.url, clips["o2"]).status_code != 200:
                assert api.proc.poll() is None and time.time() < deadline, "the API did not recover on the restarted head"
                time.sleep(0.5)
            # the ingest job accepted meanwhile retried its ray_unavailable and completes on the new head
            deadline = time.time() + 120
            while (state := httpx.get(f"{api.url}/v1/jobs/{job}", timeout=30).json())["status"] != "completed":
                assert state["status"] != "failed" and time.time() < deadline, state
                time.sleep(1.0)
            assert state["indexed"] == 1, state
            acknowledged["j0"] = JOB_CLIP
            # the item deleted meanwhile is gone from the rebuilt shard too
            assert _search(api.url, tone_wav(260.0 + 113 * 3, seconds=1.5)).json()["results"][0]["id"] != "o3"
            # every acknowledged item, from its shard rebuilt on the new head; none of the refused ingests
            for name, clip in acknowledged.items():
                hit = _search(api.url, clip).json()["results"][0]
                assert hit["id"] == name and hit["distance"] < 1e-4, (name, hit)
            listed = httpx.get(f"{api.url}/v1/collections/w/items", params={"limit": 1000}, timeout=30).json()["data"]
            assert {i["id"] for i in listed} == set(acknowledged)

            # an ingest through the Ray embedding path: its worker is started again on the new head
            late = tone_wav(3333.0, seconds=1.5)
            assert _ingest(api.url, "late", late).status_code == 200
            assert _search(api.url, late).json()["results"][0]["id"] == "late"
            named = subprocess.run([sys.executable, "-c", LIST_ACTORS, head.address], cwd=ROOT, env=_ray_free_env(),
                                   capture_output=True, text=True, timeout=120)
            assert named.returncode == 0, named.stderr[-3000:]
            assert any(name.startswith("embed:") for name in named.stdout.split()), named.stdout
            _collections_after_the_outage(api.url, head.address, pg_url, snaps)
            assert api.proc.poll() is None  # the same process throughout
        finally:
            api.kill()
    finally:
        if bare is not None and bare.poll() is None:
            bare.kill()
            bare.wait()
        head.stop()


JOB_CLIP = tone_wav(2111.0, seconds=1.5)


def _collection_routes_while_the_head_is_away(url: str, acknowledged: dict[str, bytes]) -> str:
    """Past the disconnect: every route of the sharded collection "w" answers as documented, none 500s.
    Create and delete need the head (503 ray_unavailable, nothing changed); catalog-only routes answer;
    an ingest job is accepted and retries. Returns the job's id."""
    _assert_retry_503(httpx.post(f"{url}/v1/collections", json={"name": "n", "modality": "audio"}, timeout=60),
                      "ray_unavailable")
    _assert_retry_503(httpx.delete(f"{url}/v1/collections/w", timeout=60), "ray_unavailable")
    listed = httpx.get(f"{url}/v1/collections", timeout=60)
    assert listed.status_code == 200 and [c["name"] for c in listed.json()["data"]] == ["w"], listed.text
    assert httpx.get(f"{url}/v1/collections/n", timeout=60).status_code == 404  # no catalog row left behind
    described = httpx.get(f"{url}/v1/collections/w", timeout=60)
    assert described.status_code == 200 and described.json()["items"] == len(acknowledged), described.text
    item = httpx.get(f"{url}/v1/collections/w/items/o1", timeout=60)
    assert item.status_code == 200 and item.json()["id"] == "o1", item.text
    assert httpx.delete(f"{url}/v1/collections/w/items/o3", timeout=60).status_code == 204  # catalog only
    acknowledged.pop("o3")
    accepted = httpx.post(f"{url}/v1/collections/w/items", params={"wait": "false"},
                          files={"files": ("j0.wav", JOB_CLIP)}, data={"ids": "j0"}, timeout=60)
    assert accepted.status_code == 202, accepted.text
    job = accepted.json()["id"]
    state = httpx.get(f"{url}/v1/jobs/{job}", timeout=60)
    assert state.status_code == 200 and state.json()["status"] != "failed", state.text
    return job


def _collections_after_the_outage(url: str, address: str, pg_url: str, snaps: Path) -> None:
    """The name refused meanwhile is free; the collection whose delete was refused is deleted now, with its shard
    actor and its snapshot, and stays deleted."""
    from types import SimpleNamespace

    from app.cluster.remote_index import actor_name
    from app.cluster.shard_actor import snapshot_folder

    assert httpx.post(f"{url}/v1/collections", json={"name": "n", "modality": "audio"}, timeout=120).status_code == 201
    created_at = httpx.get(f"{url}/v1/collections/w", timeout=60).json()["created_at"]
    folder = snapshot_folder(str(snaps), actor_name(pg_url, SimpleNamespace(name="w", created_at=created_at), 0, 1))
    deadline = time.time() + 30
    while not folder.is_dir():  # written within a second of the shard's (re)opening
        assert time.time() < deadline, sorted(p.name for p in snaps.iterdir())
        time.sleep(0.5)
    deleted = httpx.delete(f"{url}/v1/collections/w", timeout=60)
    assert deleted.status_code == 204, deleted.text
    assert not folder.exists()
    time.sleep(2.5)  # the follower polls the catalog every second: it must not bring "w" back
    assert httpx.get(f"{url}/v1/collections/w", timeout=60).status_code == 404
    assert [c["name"] for c in httpx.get(f"{url}/v1/collections", timeout=60).json()["data"]] == ["n"]
    named = subprocess.run([sys.executable, "-c", LIST_ACTORS, address], cwd=ROOT, env=_ray_free_env(),
                           capture_output=True, text=True, timeout=120)
    assert named.returncode == 0, named.stderr[-3000:]
    shards = [name for name in named.stdout.split() if name.startswith("shard:")]
    assert shards and all(":w:" not in name for name in shards), shards  # n's shard only


def ready_reasons_name_the_head(url: str, address: str) -> bool:
    ready = httpx.get(f"{url}/readyz", timeout=30)
    return ready.status_code == 503 and any(f"the Ray head at {address} cannot be reached" in r for r in ready.json()["reasons"])


@pytest.mark.slow
def test_a_batch_sent_under_a_newer_ray_connection_starts_the_workers_again(tmp_path, pg_url, ray_session, monkeypatch):
    """The first batch sent to the embedding workers after a rejoin starts them on the cluster joined now.

    A rejoin (app/cluster/ray_runtime.reconnect) counts a new connection; here the count is moved on by hand on the
    session's Ray, which stays up, so both sets of workers can be seen: the first ingest after it runs on new ones.
    """
    from fastapi.testclient import TestClient

    from app.cluster import ray_runtime
    from app.main import create_app
    from tests.conftest import make_settings

    ray = ray_session
    settings = make_settings(tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=1,
                             cluster={"embed_workers": 1, "embed_cpus": 0.5, "shard_timeout_s": 60.0})

    def workers() -> set[str]:
        return {a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("embed:")}

    already = workers()
    try:
        with TestClient(create_app(settings)) as client:
            assert client.post("/v1/collections", json={"name": "g", "modality": "audio"}).status_code == 201
            first, second = tone_wav(410.0, seconds=1.5), tone_wav(2750.0, seconds=1.5)
            assert client.post("/v1/collections/g/items", files={"files": ("a.wav", first)}, data={"ids": "a"}).status_code == 200
            started = workers() - already
            assert len(started) == 1
            monkeypatch.setattr(ray_runtime, "_generation", ray_runtime.generation() + 1)  # as a rejoin does
            answer = client.post("/v1/collections/g/items", files={"files": ("b.wav", second)}, data={"ids": "b"})
            assert answer.status_code == 200, answer.text
            reopened = workers() - already - started
            assert len(reopened) == 1, reopened  # a new worker, under a new name, did the second ingest
            (name,) = reopened
            assert ray.get(ray.get_actor(name, namespace=ray_runtime.NAMESPACE).where.remote(), timeout=60)["batches"] >= 1
            for item, clip in (("a", first), ("b", second)):
                found = client.post("/v1/collections/g/search", files={"file": ("q.wav", clip)}, data={"k": "1"}).json()
                assert found["results"][0]["id"] == item
    finally:
        for name in workers() - already:  # the first worker outlives the pool here (its cluster was not left)
            try:
                ray.kill(ray.get_actor(name, namespace=ray_runtime.NAMESPACE))
            except ValueError:
                pass

def test_answers_of_embedding_workers_stay_inside_rays_inline_limit():
    """A worker's answer over 100 KiB would be fetched through this node's raylet, which dies with a head on the
    same machine and then ends the process that asks it (app/cluster/embedding.ANSWER_INLINE_BYTES)."""
    import pickle

    from app.cluster.embedding import remote_batch_size

    assert remote_batch_size(32, 512, 256) == 32  # the audio encoders: the configured batch unchanged
    for dim, bits in [(512, 256), (768, 256), (1024, 512), (4096, 1024)]:
        rows = remote_batch_size(1024, dim, bits)
        answer = (np.zeros((rows, dim), np.float32), np.zeros((rows, bits // 8), np.uint8))  # EmbedWorker.encode's
        assert len(pickle.dumps(answer, protocol=5)) < 100 * 1024
        assert rows == 1024 or len(pickle.dumps((np.zeros((rows + 2, dim), np.float32),
                                                 np.zeros((rows + 2, bits // 8), np.uint8)), protocol=5)) > 96 * 1024
    assert remote_batch_size(32, 100_000, 8) == 1  # never zero


def test_openapi_documents_the_503_of_a_lost_ray_head(tmp_path):
    from app.main import create_app
    from tests.conftest import make_settings

    paths = create_app(make_settings(tmp_path)).openapi()["paths"]
    for path in ("/v1/collections/{name}/items", "/v1/collections/{name}/search"):
        described = paths[path]["post"]["responses"]["503"]["description"]
        assert "the Ray head cannot be reached" in described or "Ray head with the embedding workers" in described, described
        assert "ray_unavailable" in described and "Retry-After" in described
