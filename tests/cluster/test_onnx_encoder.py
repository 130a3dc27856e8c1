"""A bring-your-own ONNX encoder in cluster mode (issue 33): PostgreSQL catalog, index on two Ray shard
actors, ingest encoded on a Ray embedding worker.

The worker loads the folder from ``RECALL_ENCODERS__ONNX_DIR`` itself (the API passes every encoder root
to it), returns floats and placeholder codes; the API process fits the collection's PCA + ITQ codes on
the first request and stores those, so the shards, which replay the catalog, search the fitted codes.
Every answer is checked against the tiny model run directly in the test and a brute-force ranking.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient

from app.cluster.ray_runtime import NAMESPACE
from app.cluster.remote_index import catalog_prefix
from app.encoders.onnx_folder.itq import ItqCodes
from app.features.windows import cut_audible_windows
from app.main import create_app
from app.storage.postgres import PostgresCatalog
from tests.api.test_onnx_encoders import _clips, _expect, _noise, _wav
from tests.conftest import make_settings
from tests.encoders.onnx_models import DIM, HOP_S, SAMPLE_RATE, WINDOW_S, audio_folder, unit


def _embed(model: torch.nn.Module, wave: np.ndarray) -> np.ndarray:
    windows, _ = cut_audible_windows(wave, SAMPLE_RATE, WINDOW_S, HOP_S)
    return unit(model(torch.from_numpy(np.stack(windows))))


def _search(client: TestClient, wave: np.ndarray, mode: str, k: int) -> list[dict]:
    response = client.post("/v1/collections/s/search", files={"file": ("q.wav", _wav(wave), "audio/wav")},
                           data={"k": str(k), "mode": mode})
    assert response.status_code == 200, response.text
    return response.json()["results"]


@pytest.mark.slow
def test_an_onnx_folder_serves_a_sharded_collection_encoded_on_ray(tmp_path, pg_url, ray_session):
    ray = ray_session
    onnx_dir = tmp_path / "encoders"
    _, model = audio_folder(onnx_dir / "tiny-audio")
    settings = make_settings(
        tmp_path, catalog_url=pg_url, ray_address="auto", index_shards=2,
        cluster={"embed_workers": 1, "embed_cpus": 0.5, "shard_timeout_s": 60.0}, batching={"max_batch_size": 4},
        encoders={"default_audio": "audio-baseline", "default_image": "image-baseline", "onnx_dir": str(onnx_dir)})
    clips = _clips()
    try:
        with TestClient(create_app(settings)) as client:
            created = client.post("/v1/collections", json={"name": "s", "modality": "audio", "encoder": "tiny-audio"})
            assert created.status_code == 201, created.text
            files = [("files", (f"{key}.wav", _wav(wave), "audio/wav")) for key, wave in clips.items()]
            response = client.post("/v1/collections/s/items", files=files, data={"ids": ",".join(clips)})
            assert response.status_code == 200 and not response.json()["errors"], response.text

            # the ingest was encoded on the Ray worker (batches of 4 windows), not in the API process
            workers = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("embed:")]
            assert workers and sum(ray.get(ray.get_actor(n, namespace=NAMESPACE).where.remote())["batches"] for n in workers) > 0

            # the catalog holds the model's floats and the collection's fitted codes (not the worker's placeholders)
            fits = list((settings.data_dir / "posthoc").glob("s@*.npz"))
            assert len(fits) == 1
            hasher = ItqCodes.load(fits[0])
            items = {key: _embed(model, wave) for key, wave in clips.items()}
            assert hasher.fitted_on == sum(len(v) for v in items.values())
            catalog = PostgresCatalog(pg_url)
            stored = {}
            for key, vectors in items.items():
                _, _, floats, codes = catalog.item_segments("s", key, DIM, DIM)
                assert np.allclose(floats, vectors, atol=1e-5)
                assert np.array_equal(codes, hasher.codes(floats))
                stored[key] = codes
            assert client.get("/v1/collections/s").json()["binary_codes"]["fitted_on"] == hasher.fitted_on

            # search through the shard actors equals the model run directly (float), and brute-force Hamming
            # over the fitted codes (binary; ties come in any order, so distances are compared by id)
            for seed in range(2):
                wave = _noise(np.random.default_rng(200 + seed), int(SAMPLE_RATE * WINDOW_S))
                query = _embed(model, wave)[0]
                expected = {key: float((1.0 - vectors @ query).min()) for key, vectors in items.items()}
                _expect(_search(client, wave, "float", len(clips)), expected, len(clips))
                _expect(_search(client, wave, "two_stage", 3), expected, 3)
                query_code = hasher.codes(query[None].astype(np.float32))[0]
                hamming = {key: float(min(np.unpackbits(c ^ query_code).sum() for c in codes)) for key, codes in stored.items()}
                assert {r["id"]: r["distance"] for r in _search(client, wave, "binary", len(clips))} == hamming
            assert client.delete("/v1/collections/s").status_code in (200, 204)
    finally:
        for actor in ray.util.list_named_actors(all_namespaces=True):  # shard actors are detached: end this test's
            if actor["name"].startswith(catalog_prefix(pg_url)):
                ray.kill(ray.get_actor(actor["name"], namespace=NAMESPACE), no_restart=True)
