"""SIGKILL the server during a stream of ingests, several times: nothing acknowledged is lost."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import tone_wav


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(data_dir, port) -> subprocess.Popen:
    env = {**os.environ, "RECALL_DATA_DIR": str(data_dir), "RECALL_INDEX__SNAPSHOT_EVERY": "7", "HF_HUB_OFFLINE": "1",
           "RECALL_ENCODERS__DEFAULT_AUDIO": "audio-baseline", "RECALL_ENCODERS__DEFAULT_IMAGE": "image-baseline"}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not become ready")


@pytest.mark.slow
def test_acknowledged_writes_survive_sigkill(tmp_path):
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    acknowledged: set[str] = set()
    clips = {f"clip{i}": tone_wav(150 + 37 * i, seconds=1.5) for i in range(200)}
    counter = 0
    for cycle in range(3):
        proc = _start(tmp_path / "data", port)
        if cycle == 0:
            assert httpx.post(f"{url}/v1/collections", json={"name": "d", "modality": "audio"}).status_code == 201
        stop = threading.Event()

        def stream() -> None:
            nonlocal counter
            with httpx.Client(base_url=url, timeout=10) as client:
                while not stop.is_set():
                    # upserts of earlier ids mixed with new ones, two files per request
                    ids = [f"clip{counter % 200}", f"clip{(counter * 7 + 3) % 200}"]
                    counter += 1
                    if ids[0] == ids[1]:
                        continue
                    files = [("files", (f"{i}.wav", clips[i])) for i in ids]
                    try:
                        response = client.post("/v1/collections/d/items", files=files, data={"ids": ",".join(ids)})
                    except httpx.HTTPError:
                        return  # the server died mid-request: not acknowledged
                    if response.status_code == 200:
                        acknowledged.update(r["id"] for r in response.json()["indexed"])

        writer = threading.Thread(target=stream)
        writer.start()
        time.sleep(1.0 + 0.7 * cycle)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        stop.set()
        writer.join()

        proc = _start(tmp_path / "data", port)
        try:
            stats = httpx.get(f"{url}/v1/collections/d").json()
            assert stats["items"] >= len(acknowledged) > 0
            assert stats["segments"] == stats["indexed_segments"], stats
            listed = httpx.get(f"{url}/v1/collections/d/items", params={"limit": 1000}).json()["data"]
            assert acknowledged <= {item["id"] for item in listed}
            probe = sorted(acknowledged)[cycle]
            response = httpx.post(f"{url}/v1/collections/d/search", files={"file": ("q.wav", clips[probe])}, data={"k": "1", "mode": "float"})
            assert response.json()["results"][0]["distance"] < 1e-4
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_an_accepted_job_survives_sigkill(tmp_path):
    """A 202 is an acknowledgement too: the job's files are on disk and it resumes after a crash."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    proc = _start(tmp_path / "data", port)
    files = [("files", (f"j{i}.wav", tone_wav(200 + 20 * i, seconds=4.0))) for i in range(40)]
    try:
        httpx.post(f"{url}/v1/collections", json={"name": "j", "modality": "audio"})
        accepted = httpx.post(f"{url}/v1/collections/j/items?wait=false", files=files, timeout=60)
        assert accepted.status_code == 202
        job_id = accepted.json()["id"]
    finally:
        proc.send_signal(signal.SIGKILL)  # at once: most of the job is still to do
        proc.wait()
    proc = _start(tmp_path / "data", port)
    try:
        deadline = time.time() + 120
        while (job := httpx.get(f"{url}/v1/jobs/{job_id}").json())["status"] != "completed":
            assert job["status"] in ("queued", "running") and time.time() < deadline, job
            time.sleep(0.2)
        stats = httpx.get(f"{url}/v1/collections/j").json()
        assert job["indexed"] == 40 and job["errors"] == [] and stats["items"] == 40
        assert stats["segments"] == stats["indexed_segments"]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
