"""Cluster mode as it is deployed: API processes that join a separately started Ray head.

The rest of the suite runs Ray inside the test process (``ray.init(num_cpus=8)``), which never
meets what a deployment meets: a head started by `ray start --head` as its own process, which turns
token authentication on when it finds a token, and `recall serve` processes joining it by
address. Here the head is exactly that (tests/cluster/ray_head.py, one per module and
authentication mode, on 127.0.0.1 only), the catalog is the session's PostgreSQL, and the API
processes are `recall serve` subprocesses with index shards and embedding workers on the head.
"""

from __future__ import annotations

import secrets
import time

import httpx
import pytest

from tests.cluster.ray_head import RAY, RayHead
from tests.cluster.ingest_stream import IngestStream
from tests.cluster.serve import free_port, serve, serve_exit
from tests.conftest import tone_wav

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not RAY.is_file(), reason="the ray command is not installed")]

TOKEN = f"recall-test-{secrets.token_hex(12)}"


@pytest.fixture(scope="module", params=["token", "open"])
def head(request):
    """A Ray head with token authentication on ("token") or explicitly off ("open")."""
    started = RayHead(token=TOKEN if request.param == "token" else None).start()
    yield started
    started.stop()


def _cluster_env(head: RayHead) -> dict[str, str]:
    return {
        **head.env(),
        "RECALL_INDEX_SHARDS": "2",
        "RECALL_CLUSTER__EMBED_WORKERS": "1",  # ingest encodes on a Ray actor on the head
        "RECALL_CLUSTER__EMBED_CPUS": "0.5",  # two API processes' workers and the shards fit the head's 4 CPUs
        "RECALL_CLUSTER__SHARD_TIMEOUT_S": "60",  # a shard's first catalog replay on a loaded 2-core machine
    }


def _ray_batchers(url: str) -> set[str]:
    """Batchers in front of Ray embedding workers that this API process has used (its queue-depth gauge)."""
    text = httpx.get(f"{url}/metrics").text
    return {line.split('batcher="')[1].split('"')[0] for line in text.splitlines()
            if line.startswith("recall_queue_depth{") and ':ray' in line}


def test_two_api_processes_join_the_head_and_survive_a_sigkill(head, tmp_path, pg_url):
    env = _cluster_env(head)
    a = serve(tmp_path / "data", pg_url, **env)
    b = serve(tmp_path / "data", pg_url, **env)
    try:
        # the first write of the report, which answered 500 InvalidAuthToken
        assert httpx.post(f"{a.url}/v1/collections", json={"name": "w", "modality": "audio"}, timeout=120).status_code == 201

        clips = {f"s{i}": tone_wav(180 + 41 * i, seconds=1.2) for i in range(60)}
        # the first ingest waits for the embedding worker to start on the head
        writer = IngestStream(a.url, clips, timeout=120)
        writer.start()
        writer.wait_for(5, 180)
        # A's ingests were encoded by its embedding worker on the head, not in A
        assert _ray_batchers(a.url), "no ingest went through a Ray embedding worker"
        a.kill()  # SIGKILL mid-stream
        writer.finish()
        acknowledged = writer.acknowledged
        assert not writer.refused, writer.refused
        assert 5 <= len(acknowledged) < len(clips)  # killed mid-stream

        # through B: every acknowledged item is listed, indexed, and found by its own clip
        listed = {i["id"] for i in httpx.get(f"{b.url}/v1/collections/w/items", params={"limit": 1000}).json()["data"]}
        assert set(acknowledged) <= listed
        stats = httpx.get(f"{b.url}/v1/collections/w").json()
        assert stats["segments"] == stats["indexed_segments"], stats
        with httpx.Client(base_url=b.url, timeout=120) as client:
            for name in acknowledged:
                found = client.post("/v1/collections/w/search", files={"file": ("q.wav", clips[name])},
                                    data={"k": "1", "mode": "float"}).json()["results"]
                assert found[0]["id"] == name and found[0]["distance"] < 1e-4, (name, found)

            # B's own embedding worker joined the same head
            late = tone_wav(3100.0, seconds=1.2)
            assert client.post("/v1/collections/w/items", files={"files": ("late.wav", late)}, data={"ids": "late"}).status_code == 200
            assert _ray_batchers(b.url)
            found = client.post("/v1/collections/w/search", files={"file": ("q.wav", late)}, data={"k": "1", "mode": "float"}).json()
            assert found["results"][0]["id"] == "late"
    finally:
        a.kill()
        b.kill()


@pytest.mark.parametrize("head", ["token"], indirect=True)
def test_serve_stops_at_start_when_the_head_refuses_its_token(head, tmp_path, pg_url):
    no_token = {k: v for k, v in head.env().items() if not k.startswith("RECALL_CLUSTER__RAY_AUTH")}
    # a home of its own: any earlier local ray.init() on this machine (the suite's in-process Ray is one) left a
    # token in ~/.ray/auth_token, which Ray would send, and then the head refuses that token instead
    (tmp_path / "home").mkdir()
    no_token["HOME"] = str(tmp_path / "home")
    wrong = tmp_path / "wrong_token"
    wrong.write_text("not-the-token")
    for env, said in [
        (no_token, "requires token authentication and this process sent no token"),
        ({**no_token, "RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE": str(wrong)}, "refused the token in RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE"),
        ({**no_token, "RECALL_CLUSTER__RAY_AUTH_TOKEN": "not-the-token"}, "refused the token in RECALL_CLUSTER__RAY_AUTH_TOKEN"),
    ]:
        run = serve_exit(tmp_path / "data", pg_url, **env)
        assert run.returncode == 2, run.stderr[-3000:]
        message = run.stderr.strip().splitlines()[-1]
        assert message.startswith("recall serve: the Ray head at ") and said in message, message
        assert "RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE" in message and "Traceback" not in run.stderr


def test_serve_stops_at_start_when_the_head_cannot_be_reached(tmp_path, pg_url):
    port = free_port()  # nothing listens there
    run = serve_exit(tmp_path / "data", pg_url, RECALL_RAY_ADDRESS=f"127.0.0.1:{port}", RECALL_CLUSTER__NODE_IP="127.0.0.1")
    assert run.returncode == 2, run.stderr[-3000:]
    message = run.stderr.strip().splitlines()[-1]
    assert message.startswith(f"recall serve: cannot reach the Ray head at 127.0.0.1:{port}"), message
    assert f"RECALL_RAY_ADDRESS='127.0.0.1:{port}'" in message and "Traceback" not in run.stderr


def test_serve_stops_at_start_when_the_token_file_cannot_be_read(tmp_path, pg_url):
    # checked before Ray reads it: Ray aborts the process on an unreadable RAY_AUTH_TOKEN_PATH
    missing = tmp_path / "no_such_token"
    run = serve_exit(tmp_path / "data", pg_url, RECALL_RAY_ADDRESS=f"127.0.0.1:{free_port()}",
                     RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE=str(missing))
    assert run.returncode == 2, run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"recall serve: RECALL_CLUSTER__RAY_AUTH_TOKEN_FILE={str(missing)!r} cannot be read (No such file or directory); "
        "point it at the file holding the Ray head's token")


def test_one_token_source_at_a_time():
    from app.settings import ClusterSettings

    with pytest.raises(ValueError, match="not both"):
        ClusterSettings(ray_auth_token="a", ray_auth_token_file="/b")


def _search(url: str, clip: bytes) -> httpx.Response:
    return httpx.post(f"{url}/v1/collections/w/search", files={"file": ("q.wav", clip)}, data={"k": "1", "mode": "float"},
                      timeout=60)


def test_a_lost_head_makes_the_api_503_and_a_restarted_one_is_rejoined(tmp_path, pg_url):
    lost = RayHead(cpus=2).start()  # its own head: this test kills it and starts it again on the same port
    snaps = tmp_path / "snaps"
    try:
        api = serve(tmp_path / "data", pg_url, **lost.env(), RECALL_INDEX_SHARDS="1",
                    RECALL_CLUSTER__SHARD_SNAPSHOT_S="0.5", RECALL_CLUSTER__SHARD_SNAPSHOT_DIR=str(snaps))
        try:
            assert httpx.get(f"{api.url}/readyz").status_code == 200
            assert httpx.post(f"{api.url}/v1/collections", json={"name": "w", "modality": "audio"}).status_code == 201
            clips = {f"h{n}": tone_wav(240.0 + 97 * n, seconds=1.5) for n in range(4)}
            for name, clip in clips.items():
                assert httpx.post(f"{api.url}/v1/collections/w/items", files={"files": (f"{name}.wav", clip)},
                                  data={"ids": name}, timeout=60).status_code == 200
            assert _search(api.url, clips["h1"]).json()["results"][0]["id"] == "h1"
            deadline = time.time() + 20
            while not list(snaps.rglob("w.binary.faiss")):  # the shard snapshotted its partition on its node
                assert time.time() < deadline, "no shard snapshot written"
                time.sleep(0.2)

            lost.kill()
            deadline = time.time() + 20
            while (ready := httpx.get(f"{api.url}/readyz")).status_code == 200:
                assert time.time() < deadline, "still ready 20 s after the head died"
                time.sleep(0.2)
            assert any(f"the Ray head at {lost.address} cannot be reached" in r for r in ready.json()["reasons"]), ready.json()
            # meanwhile: the shard's process may outlive its head for a while and answer whole, else a 503 with
            # Retry-After naming it; never a short list, never a 500
            for _ in range(5):
                answer = _search(api.url, clips["h1"])
                if answer.status_code == 200:
                    assert answer.json()["results"][0]["id"] == "h1"
                else:
                    assert answer.status_code == 503 and answer.headers["retry-after"] == "2", answer.text
                    assert answer.json()["error"]["details"]["missing_shards"] == [1]

            lost.proc.wait()
            lost.start()  # the same address, a new (empty) Ray cluster
            deadline = time.time() + 90
            while httpx.get(f"{api.url}/readyz").status_code != 200 or _search(api.url, clips["h1"]).status_code != 200:
                assert api.proc.poll() is None and time.time() < deadline, "the API did not recover on the restarted head"
                time.sleep(0.5)
            # the same process, not restarted: its shard was started again on the new head and holds every item
            assert api.proc.poll() is None
            for name, clip in clips.items():
                hit = _search(api.url, clip).json()["results"][0]
                assert hit["id"] == name and hit["distance"] < 1e-4
            late = tone_wav(1777.0, seconds=1.5)
            assert httpx.post(f"{api.url}/v1/collections/w/items", files={"files": ("late.wav", late)},
                              data={"ids": "late"}, timeout=60).status_code == 200
            assert _search(api.url, late).json()["results"][0]["id"] == "late"
        finally:
            api.kill()
    finally:
        lost.stop()
