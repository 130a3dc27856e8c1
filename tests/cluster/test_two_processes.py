"""Two `recall serve` processes on one PostgreSQL catalog are one service.

Ingest through one, search through the other at once; jobs started on one are polled on the
other; SIGKILL one in the middle of an ingest stream, and every acknowledged item is found
through the survivor.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.cluster.ingest_stream import IngestStream
from tests.cluster.serve import serve
from tests.conftest import tone_wav


@pytest.mark.slow
def test_two_api_processes_share_writes_jobs_and_survive_a_sigkill(tmp_path, pg_url):
    a = serve(tmp_path / "data", pg_url, RECALL_CLUSTER__JOB_LEASE_S="2")
    b = serve(tmp_path / "data", pg_url, RECALL_CLUSTER__JOB_LEASE_S="2")
    try:
        assert httpx.post(f"{a.url}/v1/collections", json={"name": "w", "modality": "audio"}).status_code == 201
        # created on A, visible on B without a restart
        assert httpx.get(f"{b.url}/v1/collections/w").status_code == 200
        clip = tone_wav(523.0, seconds=1.5)
        assert httpx.post(f"{a.url}/v1/collections/w/items", files={"files": ("c.wav", clip)}, data={"ids": "first"}).status_code == 200
        # acknowledged by A: B's very next search sees it (no waiting, no polling interval)
        hit = httpx.post(f"{b.url}/v1/collections/w/search", files={"file": ("q.wav", clip)}, data={"k": "1", "mode": "float"}).json()
        assert hit["results"][0]["id"] == "first" and hit["results"][0]["distance"] < 1e-4
        # a delete through B is seen by A's next search
        assert httpx.delete(f"{b.url}/v1/collections/w/items/first").status_code == 204
        gone = httpx.post(f"{a.url}/v1/collections/w/search", files={"file": ("q.wav", clip)}, data={"k": "1", "mode": "float"}).json()
        assert gone["results"] == []

        # a job accepted by A, polled on B until done
        files = [("files", (f"j{i}.wav", tone_wav(300 + 25 * i))) for i in range(5)]
        accepted = httpx.post(f"{a.url}/v1/collections/w/items?wait=false", files=files)
        assert accepted.status_code == 202
        deadline = time.time() + 60
        while (job := httpx.get(f"{b.url}/v1/jobs/{accepted.json()['id']}").json())["status"] != "completed":
            assert job["status"] in ("queued", "running") and time.time() < deadline, job
            time.sleep(0.1)
        assert job["indexed"] == 5

        # a job accepted by A, which is killed at once: B finishes it (B claims it, or takes it over when A's lease lapses)
        files = [("files", (f"k{i}.wav", tone_wav(700 + 31 * i, seconds=2.0))) for i in range(6)]
        orphan = httpx.post(f"{a.url}/v1/collections/w/items?wait=false", files=files).json()["id"]
        a.kill()
        deadline = time.time() + 60
        while (job := httpx.get(f"{b.url}/v1/jobs/{orphan}").json())["status"] != "completed":
            assert job["status"] in ("queued", "running") and time.time() < deadline, job
            time.sleep(0.2)
        assert job["indexed"] == 6 and job["errors"] == []
        a = serve(tmp_path / "data", pg_url, RECALL_CLUSTER__JOB_LEASE_S="2")

        # SIGKILL A in the middle of a stream of ingests: everything it acknowledged is found through B
        clips = {f"s{i}": tone_wav(180 + 41 * i, seconds=1.2) for i in range(60)}
        writer = IngestStream(a.url, clips)
        writer.start()
        writer.wait_for(5, 30)
        a.kill()
        writer.finish()
        acknowledged = writer.acknowledged
        assert len(acknowledged) >= 5
        listed = {i["id"] for i in httpx.get(f"{b.url}/v1/collections/w/items", params={"limit": 1000}).json()["data"]}
        assert set(acknowledged) <= listed
        stats = httpx.get(f"{b.url}/v1/collections/w").json()
        assert stats["segments"] == stats["indexed_segments"], stats
        for name in acknowledged[:: max(1, len(acknowledged) // 5)] + acknowledged[-1:]:
            found = httpx.post(f"{b.url}/v1/collections/w/search", files={"file": ("q.wav", clips[name])},
                               data={"k": "1", "mode": "float"}).json()["results"]
            assert found[0]["id"] == name and found[0]["distance"] < 1e-4
    finally:
        a.kill()
        b.kill()
