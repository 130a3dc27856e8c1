"""Index kinds through the HTTP API: chosen at creation or automatically past a window count, shown by
GET /v1/collections/{name}, nprobe per query, bad parameters as the one JSON error shape."""

from __future__ import annotations

import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.index import kinds
from app.main import create_app
from tests.conftest import error_of, make_settings, tone_wav, wave_bytes

WINDOWS_PER_ITEM = 119  # 60 s at the baseline's 1 s window, 0.5 s hop


@pytest.fixture
def small_ivf(monkeypatch):
    # the service trains an IVF from 10,000 windows; the API contract is the same from 624 (16 lists x 39)
    monkeypatch.setattr(kinds, "IVF_MIN_WINDOWS", 0)


def _ingest(client: TestClient, name: str, items: int) -> None:
    rng = np.random.default_rng(0)
    for i in range(items):
        # noise through a different band per item: items are told apart, windows of one item are alike
        noise = rng.standard_normal(16000 * 60)
        spectrum = np.fft.rfft(noise)
        band = np.zeros_like(spectrum)
        low = 200 + 600 * i
        band[low * 60 : (low + 400) * 60] = 1
        wave = np.fft.irfft(spectrum * band, n=len(noise))
        wave = 0.3 * wave / np.abs(wave).max()
        response = client.post(f"/v1/collections/{name}/items", files=[("files", (f"n{i}.wav", wave_bytes(wave)))])
        assert response.status_code == 200, response.text


def _wait_for(client: TestClient, name: str, answering: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        index = client.get(f"/v1/collections/{name}").json()["index"]
        if index["answering"] == answering or time.monotonic() > deadline:
            return index
        time.sleep(0.2)


def test_ivf_collection_answers_from_the_ivf_once_trained(tmp_path, small_ivf) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        created = client.post("/v1/collections", json={"name": "v", "modality": "audio", "index": {"kind": "ivf", "nlist": 16, "nprobe": 4}})
        assert created.status_code == 201, created.text
        index = created.json()["index"]
        assert index["kind"] == "ivf" and index["answering"] == "flat" and index["trains_at"] == 16 * 39 and index["nprobe"] == 4
        _ingest(client, "v", 6)
        assert client.get("/v1/collections/v").json()["segments"] >= 624
        index = _wait_for(client, "v", "ivf")
        assert index["answering"] == "ivf" and index["nlist"] == 16 and index["trained_on"] >= 624 and not index["building"]

        ids = [r["id"] for r in client.get("/v1/collections/v/items").json()["data"]]
        for nprobe in (None, 1, 16):
            body = {"item_id": ids[0], "k": 3, "mode": "binary", **({"nprobe": nprobe} if nprobe else {})}
            response = client.post("/v1/collections/v/search", json=body)
            assert response.status_code == 200, response.text
            assert response.json()["results"]
        # a multipart search carries nprobe as a form field too
        response = client.post("/v1/collections/v/search", files={"file": ("q.wav", tone_wav(900))}, data={"nprobe": "2"})
        assert response.status_code == 200, response.text
        # a deleted item is never returned, by any nprobe
        assert client.delete(f"/v1/collections/v/items/{ids[2]}").status_code == 204
        for nprobe in (1, 4, 16):
            response = client.post("/v1/collections/v/search", json={"item_id": ids[3], "k": 10, "mode": "two_stage", "nprobe": nprobe})
            assert ids[2] not in [r["id"] for r in response.json()["results"]]
        for bad in (0, 65_537, "4", 2.5, True):
            response = client.post("/v1/collections/v/search", json={"item_id": ids[0], "nprobe": bad})
            assert response.status_code == 422, (bad, response.text)
            error_of(response)

    # a restart loads the IVF from its snapshot: it answers at once
    with TestClient(create_app(make_settings(tmp_path))) as client:
        index = client.get("/v1/collections/v").json()["index"]
        assert index["answering"] == "ivf" and not index["building"]


def test_auto_collection_switches_past_the_window_setting(tmp_path, small_ivf) -> None:
    settings = make_settings(tmp_path, index={"auto_ivf_windows": 700})
    with TestClient(create_app(settings)) as client:
        created = client.post("/v1/collections", json={"name": "a", "modality": "audio"}).json()
        assert created["index"]["kind"] == "auto" and created["index"]["trains_at"] == 700
        _ingest(client, "a", 5)  # 595 windows: under the setting
        assert client.get("/v1/collections/a").json()["index"]["answering"] == "flat"
        _ingest(client, "a", 7)  # past the setting
        index = _wait_for(client, "a", "ivf")
        assert index["answering"] == "ivf" and index["nlist"] == kinds.auto_nlist(index["trained_on"])
        # a flat collection never switches
        client.post("/v1/collections", json={"name": "f", "modality": "audio", "index": {"kind": "flat"}})
        _ingest(client, "f", 7)
        assert client.get("/v1/collections/f").json()["index"] == {**client.get("/v1/collections/f").json()["index"], "answering": "flat", "trains_at": None}


@pytest.mark.parametrize("index", [
    {"kind": "hnsw"},
    {"kind": "ivf", "nlist": 8},
    {"kind": "ivf", "nlist": 65_537},
    {"kind": "ivf", "nprobe": 0},
    {"kind": "ivf", "nlist": 16, "nprobe": 17},
    {"kind": "flat", "nprobe": 4},
    {"kind": "ivf", "nlist": "16"},
    {"kind": "ivf", "efSearch": 16},
    "ivf",
])
def test_bad_index_parameters_are_422_in_the_error_shape(tmp_path, index) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        response = client.post("/v1/collections", json={"name": "x", "modality": "audio", "index": index})
        assert response.status_code == 422, response.text
        error_of(response)
        response = client.post("/v1/collections", json={"name": "y", "modality": "audio", "index_kinds": ["float"], "index": {"kind": "ivf"}})
        assert response.status_code == 422 and "binary" in error_of(response)["message"]
        assert client.get("/v1/collections").json()["count"] == 0


def test_openapi_documents_the_index_choice_with_bounds(tmp_path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        doc = client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    config = schemas["IndexConfig"]["properties"]
    for name, low in (("nlist", 16), ("nprobe", 1)):
        bounded = next(s for s in config[name]["anyOf"] if s.get("type") == "integer")
        assert bounded["minimum"] == low and bounded["maximum"] == 65_536
    for body in doc["paths"]["/v1/collections/{name}/search"]["post"]["requestBody"]["content"].values():
        nprobe = body["schema"]["properties"]["nprobe"]
        assert next(s for s in nprobe["anyOf"] if s.get("type") == "integer")["maximum"] == 65_536
    assert "index" in schemas["CollectionPublic"]["required"]
    for path, method, code in (("/v1/collections", "post", "422"), ("/v1/collections/{name}", "get", "404"),
                               ("/v1/collections/{name}/search", "post", "422")):
        assert code in doc["paths"][path][method]["responses"]
