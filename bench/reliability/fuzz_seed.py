"""The seeded service bench/reliability/fuzz.py and tests/reliability/test_fuzz_api.py fuzz: names, media, settings, seeding.

Collections of audio and of images under fixed names, with items and a job, so generated requests reach
real collections, items and jobs instead of only answering 404; the clean bodies a route accepts, which
the fuzz swaps into some cases so ingest and search run on real media.
"""

from __future__ import annotations

import base64
import io
import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile as sf
from PIL import Image

KEY = "fuzz-key-1"
SYNC_INGEST_FILES = 3  # more files per request answer 202 with a job: the fuzz reaches the job routes
MAX_UPLOAD_BYTES = 2_000_000

# seeded values the path-parameter strategies mix in, so generated requests reach real
# collections, items and jobs instead of only answering 404
NAMES = ["fz-audio", "fz-image"]
STORED = [{"name": "fz-audio", "item_id": i} for i in ("a1", "a2", "sub/dir.wav")] + [{"name": "fz-image", "item_id": "i1"}]
# what the DELETE routes may remove: a whole collection, or one item of fz-audio
SCRATCH = {"/v1/collections/{name}": {"name": "fz-scratch"},
           "/v1/collections/{name}/items/{item_id}": {"name": "fz-audio", "item_id": "scratch-item"},
           "/v1/keys/{key_id}": {"key_id": "set-by-seed"}}  # a key made by seed() (ids are random)


def tone_wav(freq: float = 440.0, seconds: float = 1.0, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def png_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    array = np.zeros((size[1], size[0], 3), np.uint8)
    array[:] = color
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


_MEDIA = [("fz-audio", tone_wav(440)), ("fz-audio", tone_wav(523, seconds=2.0)), ("fz-image", png_bytes((20, 40, 200)))]
# (collection, body) pairs a route accepts; the flatmap_case hook swaps them into some positive cases
CLEAN_BODIES = {
    ("POST", "/v1/collections/{name}/items", "multipart/form-data"): [(c, {"files": [m]}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/items", "application/json"): [
        (c, {"items": [{"id": "fz-new", "content_base64": base64.b64encode(m).decode()}]}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/search", "multipart/form-data"): [(c, {"file": m, "k": 3}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/search", "application/json"): [("fz-audio", {"item_id": i, "k": 3}) for i in ("a1", "a2")] + [
        ("fz-image", {"item_id": "i1", "k": 3})],
    ("POST", "/v1/collections/{name}/judgments", "application/json"): [
        ("fz-audio", {"qid": "q1", "doc": i, "grade": 2}) for i in ("a1", "a2")],
    ("POST", "/v1/collections/{name}/judgments/runs", "application/json"): [
        ("fz-audio", {"qid": "q1", "runs": {"a": [{"id": "a1", "score": 1.0}], "b": [{"id": "a2", "score": 0.5}]}})],
}


def service_settings(data_dir: Path, **overrides: Any) -> Any:
    """The service as the fuzz runs it: keys on, the training-free encoders (fast, deterministic)."""
    from app.settings import Settings

    base: dict[str, Any] = {
        "data_dir": data_dir,
        "encoders": {"default_audio": "audio-baseline", "default_image": "image-baseline"},
        "api_keys": [KEY],
        "limits": {"max_upload_bytes": MAX_UPLOAD_BYTES, "sync_ingest_files": SYNC_INGEST_FILES},
    }
    base.update(overrides)
    return Settings(**base)


def seed(url: str) -> dict[str, list[str]]:
    """The seeded collections and items (again: restores what a fuzz case deleted); a key and a job.

    Returns the runtime ids the path-parameter hook mixes in (``job_id``).
    """
    with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=60) as http:
        for name, modality in [("fz-audio", "audio"), ("fz-image", "image"), ("fz-scratch", "audio")]:
            created = http.post("/v1/collections", json={"name": name, "modality": modality})
            assert created.status_code in (201, 409), created.text  # 409: still there from the last round
        files = [("files", ("a1.wav", tone_wav(440))), ("files", ("a2.wav", tone_wav(660))),
                 ("files", ("sub.wav", tone_wav(880))), ("files", ("scratch.wav", tone_wav(300)))]
        # ingest is an upsert by id: seeding again restores the items as they were
        http.post("/v1/collections/fz-audio/items", files=files[:3], data={
            "ids": "a1,a2,sub/dir.wav", "metadata": json.dumps([{"speaker": "x"}, {"speaker": "y"}, {}])}).raise_for_status()
        http.post("/v1/collections/fz-audio/items", files=[files[3]], data={"ids": "scratch-item"}).raise_for_status()
        http.post("/v1/collections/fz-image/items", files=[("files", ("i1.png", png_bytes((200, 30, 30))))],
                  data={"ids": "i1"}).raise_for_status()
        SCRATCH["/v1/keys/{key_id}"]["key_id"] = http.post("/v1/keys", json={"scopes": ["read"]}).raise_for_status().json()["id"]
        job = http.post("/v1/collections/fz-audio/items?wait=false", files=[("files", ("j.wav", tone_wav(500)))])
        assert job.status_code == 202, job.text
        return {"job_id": [job.json()["id"]]}


KEEP = {"fz-audio", "fz-image", "fz-scratch"}  # the collections seed() makes


def prune(url: str, older_than_s: float = 60.0) -> int:
    """Delete the collections the fuzz created more than ``older_than_s`` ago; how many.

    For cluster mode: every collection holds detached shard actors, one process each, and the fuzzing phase
    creates collections it never deletes (1,469 in one 20-minute run). Kept, they fill the Ray head's CPUs
    and every later create answers 503 cluster_full, which is right for a full cluster but is not what the fuzz
    tests. Only old ones go: a stateful sequence lasts seconds, so none of its collections is taken from it.
    """
    pruned = 0
    with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=60) as http:
        listed = http.get("/v1/collections")
        if listed.status_code != 200:
            return 0
        body = listed.json()
        rows = body["data"]
        now = time.time()
        for row in rows:
            if row["name"] in KEEP or now - float(row.get("created_at") or now) < older_than_s:
                continue
            if http.delete(f"/v1/collections/{row['name']}").status_code == 204:
                pruned += 1
    return pruned
