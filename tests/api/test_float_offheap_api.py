"""``"index": {"floats": "mmap"}`` through the HTTP API: the same answers as in-memory floats, deletes
and upserts honoured, a restart reloads the mapped floats, and a bad setting is one 422."""

from __future__ import annotations

import errno

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.index import _mapped_shard
from app.main import create_app
from app.search import pipeline
from tests.conftest import error_of, make_settings, tone_wav, wave_bytes


def _band_noise(i: int, seconds: int = 8, seed: int = 0) -> bytes:
    # noise through a different band per item: items are told apart, windows of one item are alike
    rng = np.random.default_rng(seed * 100 + i)
    noise = rng.standard_normal(16000 * seconds)
    spectrum = np.fft.rfft(noise)
    band = np.zeros_like(spectrum)
    low = 200 + 500 * i
    band[low * seconds : (low + 400) * seconds] = 1
    wave = np.fft.irfft(spectrum * band, n=len(noise))
    return wave_bytes(0.3 * wave / np.abs(wave).max())


def _ingest(client: TestClient, name: str, ids: list[int], seed: int = 0) -> None:
    files = [("files", (f"n{i}.wav", _band_noise(i, seed=seed))) for i in ids]
    response = client.post(f"/v1/collections/{name}/items", files=files, data={"ids": ",".join(f"n{i}" for i in ids)})
    assert response.status_code == 200, response.text


def _answers(client: TestClient, name: str) -> list[list[tuple[str, float]]]:
    out = []
    for body in ({"item_id": "n0", "k": 5}, {"item_id": "n3", "k": 5, "mode": "float"}, {"item_id": "n5", "k": 3}):
        response = client.post(f"/v1/collections/{name}/search", json=body)
        assert response.status_code == 200, response.text
        out.append([(r["id"], r["score"]) for r in response.json()["results"]])
    response = client.post(f"/v1/collections/{name}/search", files={"file": ("q.wav", tone_wav(900))}, data={"k": "5"})
    assert response.status_code == 200, response.text
    out.append([(r["id"], r["score"]) for r in response.json()["results"]])
    return out


@pytest.mark.parametrize("inline", [True, False])
def test_mmap_floats_answer_exactly_like_memory_floats(tmp_path, monkeypatch, inline) -> None:
    if not inline:  # large-index path: shared scans, the mapped re-rank on a worker thread
        monkeypatch.setattr(pipeline, "INLINE_SCAN_BYTES", 0)
    with TestClient(create_app(make_settings(tmp_path))) as client:
        created = client.post("/v1/collections", json={"name": "mem", "modality": "audio"})
        assert created.status_code == 201 and created.json()["index"]["floats"] == "memory"
        created = client.post("/v1/collections", json={"name": "map", "modality": "audio", "index": {"floats": "mmap"}})
        assert created.status_code == 201, created.text
        assert created.json()["index"]["floats"] == "mmap"
        for name in ("mem", "map"):
            _ingest(client, name, list(range(8)))
        stats = client.get("/v1/collections/map").json()
        assert stats["index"]["float_file_bytes"] >= stats["segments"] * stats["dim"] * 4
        assert stats["memory_bytes"] < client.get("/v1/collections/mem").json()["memory_bytes"]
        assert _answers(client, "map") == _answers(client, "mem")  # same ids, same scores, same order

        for name in ("mem", "map"):  # a delete and an upsert (n2 re-ingested with other audio)
            assert client.delete(f"/v1/collections/{name}/items/n1").status_code == 204
            _ingest(client, name, [2], seed=7)
        answers = _answers(client, "map")
        assert answers == _answers(client, "mem")
        assert all("n1" not in [i for i, _ in hits] for hits in answers)
        before = answers

    with TestClient(create_app(make_settings(tmp_path))) as client:  # restart: snapshot loaded into mapped files
        assert client.get("/v1/collections/map").json()["index"]["floats"] == "mmap"
        assert _answers(client, "map") == before


@pytest.mark.parametrize("request_body", [
    {"index_kinds": ["binary"], "index": {"floats": "mmap"}},
    {"index": {"floats": "disk"}},
    {"index": {"floats": True}},
])
def test_bad_floats_setting_is_one_422(tmp_path, request_body) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        response = client.post("/v1/collections", json={"name": "x", "modality": "audio", **request_body})
        assert response.status_code == 422, response.text
        error_of(response)
        assert client.get("/v1/collections").json()["count"] == 0


def test_a_full_disk_for_the_mapped_floats_is_a_507_that_stores_nothing(tmp_path, monkeypatch) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        client.post("/v1/collections", json={"name": "map", "modality": "audio", "index": {"floats": "mmap"}})
        _ingest(client, "map", [0, 1])
        before = client.get("/v1/collections/map").json()

        def full(fd: int, offset: int, length: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(_mapped_shard.os, "posix_fallocate", full)
        # 5 minutes of audio, ~600 windows: past the 2 x 256 rows the mapped files start with
        files = [("files", (f"n{i}.wav", _band_noise(i, seconds=60))) for i in range(2, 7)]
        response = client.post("/v1/collections/map/items", files=files)
        assert response.status_code == 507, response.text
        assert error_of(response)["details"]["reason"] == "disk_full"
        after = client.get("/v1/collections/map").json()
        assert (after["items"], after["segments"], after["indexed_segments"]) == (before["items"], before["segments"], before["indexed_segments"])
        assert client.post("/v1/collections/map/search", json={"item_id": "n0", "k": 2}).status_code == 200
        monkeypatch.undo()
        _ingest(client, "map", [2, 3])  # space again: no restart needed
        assert client.get("/v1/collections/map").json()["items"] == 4
