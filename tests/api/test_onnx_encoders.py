"""Bring-your-own ONNX encoders through the HTTP API (issue 33).

A tiny exported CLIP-style pair and a tiny audio embedder, built in the test, serve search end to
end: the ids and distances equal (within 1e-5) those of the same torch modules run directly, in
float, two-stage and (with the collection's fitted PCA + ITQ codes) binary mode. Every kind of
broken folder answers one clear 422 in the one error shape and leaves the service as it was.
"""

from __future__ import annotations

import io
import shutil

import numpy as np
import pytest
import soundfile as sf
import torch
from fastapi.testclient import TestClient
from PIL import Image

from app.encoders.onnx_folder.itq import ItqCodes
from app.features.windows import cut_audible_windows
from app.main import create_app
from tests.conftest import make_settings
from tests.encoders.broken_folders import BROKEN, make_broken
from tests.encoders.onnx_models import (
    DIM, HOP_S, SAMPLE_RATE, WINDOW_S, audio_folder, clip_folder, reference_ids, reference_pixels, unit,
)

N_IMAGES = 12
N_CLIPS = 6


def _png(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _wav(wave: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, wave, SAMPLE_RATE, format="WAV", subtype="FLOAT")
    return buffer.getvalue()


def _images() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {f"img-{i}": rng.integers(0, 256, (int(rng.integers(24, 80)), int(rng.integers(24, 80)), 3), dtype=np.uint8)
            for i in range(N_IMAGES)}


def _clips() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(8)
    return {f"clip-{i}": _noise(rng, SAMPLE_RATE) for i in range(N_CLIPS)}


def _noise(rng: np.random.Generator, samples: int) -> np.ndarray:
    """Within full scale, which the decoder clips to (so the direct run sees the same samples)."""
    return np.clip(0.3 * rng.standard_normal(samples), -1.0, 1.0).astype(np.float32)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_api")
    onnx_dir = root / "encoders"
    _, image_tower, text_tower = clip_folder(onnx_dir / "tiny-clip")
    _, audio_model = audio_folder(onnx_dir / "tiny-audio")
    for kind in BROKEN:
        make_broken(onnx_dir, kind)
    settings = make_settings(root, encoders={"default_audio": "audio-baseline", "default_image": "image-baseline",
                                             "onnx_dir": str(onnx_dir)})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "photos", "modality": "image", "encoder": "tiny-clip"}).status_code == 201
        images = _images()
        files = [("files", (f"{key}.png", _png(image), "image/png")) for key, image in images.items()]
        response = client.post("/v1/collections/photos/items", files=files, data={"ids": ",".join(images)})
        assert response.status_code == 200 and not response.json()["errors"], response.text
        assert client.post("/v1/collections", json={"name": "sounds", "modality": "audio", "encoder": "tiny-audio"}).status_code == 201
        clips = _clips()
        files = [("files", (f"{key}.wav", _wav(wave), "audio/wav")) for key, wave in clips.items()]
        response = client.post("/v1/collections/sounds/items", files=files, data={"ids": ",".join(clips)})
        assert response.status_code == 200 and not response.json()["errors"], response.text
        yield {"client": client, "root": root, "onnx_dir": onnx_dir, "settings": settings, "image": image_tower,
               "text": text_tower, "audio": audio_model, "images": images, "clips": clips}


def _search(client: TestClient, collection: str, **body) -> list[dict]:
    response = client.post(f"/v1/collections/{collection}/search", json=body)
    assert response.status_code == 200, response.text
    return response.json()["results"]


def _expect(results: list[dict], expected: dict[str, float], k: int, tolerance: float = 1e-5) -> None:
    """Same ids in the same order (ties aside) and the same distances as the direct run."""
    ranked = sorted(expected, key=lambda key: (expected[key], key))[:k]
    assert [r["id"] for r in results] == ranked
    assert np.allclose([r["distance"] for r in results], [expected[key] for key in ranked], atol=tolerance, rtol=0)


def _image_vectors(service) -> dict[str, np.ndarray]:
    pixels = np.stack([reference_pixels(image) for image in service["images"].values()])
    return dict(zip(service["images"], unit(service["image"](torch.from_numpy(pixels)))))


def test_the_listing_shows_modality_dimension_licence_source_and_version(service):
    rows = {row["name"]: row for row in service["client"].get("/v1/encoders").json()["data"]}
    clip, audio = rows["tiny-clip"], rows["tiny-audio"]
    assert (clip["modality"], clip["dim"], clip["licence"], clip["version"]) == ("image", DIM, "MIT", "seed0")
    assert (audio["modality"], audio["dim"], audio["licence"], audio["sample_rate"]) == ("audio", DIM, "CC-BY-4.0", SAMPLE_RATE)
    assert clip["source"] == "tests/encoders/onnx_models.py (random weights)" and clip["supports_text"]
    assert rows["audio-baseline"]["licence"] == "Apache-2.0"
    # every folder is checked at start: a broken one is listed with its problem, not loaded
    assert rows["broken-checksum"]["loaded"] is False and "sha256" in rows["broken-checksum"]["problem"]
    assert all(row["problem"] for name, row in rows.items() if name.startswith("broken-"))
    assert clip["loaded"] and audio["loaded"] and "problem" not in clip
    assert "no manifest.json" in rows["broken-no-manifest"]["problem"]


def test_text_search_equals_the_model_run_directly(service):
    vectors = _image_vectors(service)
    for text in ["a red circle", "the dog on a blue background", "green square photo"]:
        ids = torch.from_numpy(reference_ids(text, service["onnx_dir"] / "tiny-clip" / "tokenizer.json"))[None]
        query = unit(service["text"](ids))[0]
        expected = {key: 1.0 - float(vector @ query) for key, vector in vectors.items()}
        for mode in ("float", "two_stage"):  # two-stage re-scores its shortlist (here all) exactly
            _expect(_search(service["client"], "photos", text=text, k=5, mode=mode, oversample=10), expected, 5)


def test_image_example_search_equals_the_model_run_directly(service):
    vectors = _image_vectors(service)
    query_image = np.random.default_rng(99).integers(0, 256, (50, 40, 3), dtype=np.uint8)
    query = unit(service["image"](torch.from_numpy(reference_pixels(query_image))[None]))[0]
    expected = {key: 1.0 - float(vector @ query) for key, vector in vectors.items()}
    response = service["client"].post("/v1/collections/photos/search", files={"file": ("q.png", _png(query_image), "image/png")},
                                      data={"k": "4", "mode": "float"})
    assert response.status_code == 200, response.text
    _expect(response.json()["results"], expected, 4)


def test_binary_search_uses_the_collection_s_fitted_codes(service):
    fits = list((service["root"] / "data" / "posthoc").glob("photos@*.npz"))
    assert len(fits) == 1
    hasher = ItqCodes.load(fits[0])
    assert hasher.fitted_on == N_IMAGES and hasher.bits == DIM
    vectors = _image_vectors(service)
    codes = dict(zip(vectors, hasher.codes(np.stack(list(vectors.values())))))
    text = "a red circle"
    ids = torch.from_numpy(reference_ids(text, service["onnx_dir"] / "tiny-clip" / "tokenizer.json"))[None]
    query = hasher.codes(unit(service["text"](ids)))[0]
    expected = {key: float(np.unpackbits(code ^ query).sum()) for key, code in codes.items()}
    results = _search(service["client"], "photos", text=text, k=N_IMAGES, mode="binary")
    assert {r["id"]: r["distance"] for r in results} == expected  # Hamming ties may come in any order


def test_audio_search_equals_the_model_run_directly(service):
    def embed(wave: np.ndarray) -> np.ndarray:
        windows, _ = cut_audible_windows(wave, SAMPLE_RATE, WINDOW_S, HOP_S)
        return unit(service["audio"](torch.from_numpy(np.stack(windows))))

    items = {key: embed(wave) for key, wave in service["clips"].items()}
    for seed in range(3):
        wave = _noise(np.random.default_rng(100 + seed), int(SAMPLE_RATE * WINDOW_S))
        query = embed(wave)
        assert len(query) == 1
        expected = {key: float((1.0 - vectors @ query[0]).min()) for key, vectors in items.items()}
        response = service["client"].post("/v1/collections/sounds/search", files={"file": ("q.wav", _wav(wave), "audio/wav")},
                                          data={"k": str(N_CLIPS), "mode": "float"})
        assert response.status_code == 200, response.text
        _expect(response.json()["results"], expected, N_CLIPS)
    # a stored clip finds itself first in every mode (its own windows, distance 0)
    for mode in ("float", "binary", "two_stage"):
        results = _search(service["client"], "sounds", item_id="clip-2", k=3, mode=mode)
        assert results and "clip-2" not in [r["id"] for r in results]


def test_a_window_the_model_was_not_exported_for_is_refused(service):
    response = service["client"].post("/v1/collections", json={"name": "w", "modality": "audio", "encoder": "tiny-audio", "window_s": 0.5})
    assert response.status_code == 422 and "exactly 0.25 s" in response.json()["error"]["message"]


def test_each_broken_folder_answers_one_clear_422_and_changes_nothing(service):
    client = service["client"]
    before = client.get("/v1/collections").json()
    results_before = _search(client, "photos", text="a red circle", k=5, mode="float")
    for kind, (start, _, problem) in sorted(BROKEN.items()):
        name = f"broken-{kind.replace('_', '-')}"
        body = {"name": f"c-{kind.replace('_', '-')}", "modality": "image" if start == "clip" else "audio", "encoder": name}
        response = client.post("/v1/collections", json=body)
        assert response.status_code == 422, (kind, response.text)
        error = response.json()["error"]
        assert set(response.json()) == {"error"} and error["code"] == "invalid_input"
        assert error["details"]["problem"] == problem, (kind, error)
        assert name in error["message"] and "\n" not in error["message"]
    assert client.get("/v1/collections").json() == before
    assert client.get("/readyz").status_code == 200
    assert _search(client, "photos", text="a red circle", k=5, mode="float") == results_before


def test_the_openapi_document_lists_the_folder_422(service):
    spec = service["client"].get("/openapi.json").json()
    response = spec["paths"]["/v1/collections"]["post"]["responses"]["422"]
    assert "ONNX folder" in response["description"]
    assert response["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorBody")


def test_after_a_restart_a_collection_keeps_its_encoder_and_codes(tmp_path):
    onnx_dir = tmp_path / "encoders"
    clip_folder(onnx_dir / "tiny-clip")
    settings = make_settings(tmp_path, encoders={"default_audio": "audio-baseline", "default_image": "image-baseline",
                                                 "onnx_dir": str(onnx_dir)})
    images = _images()
    files = [("files", (f"{key}.png", _png(image), "image/png")) for key, image in images.items()]
    with TestClient(create_app(settings)) as client:
        client.post("/v1/collections", json={"name": "photos", "modality": "image", "encoder": "tiny-clip"})
        client.post("/v1/collections", json={"name": "plain", "modality": "image"})
        assert client.post("/v1/collections/photos/items", files=files, data={"ids": ",".join(images)}).status_code == 200
        assert client.post("/v1/collections/plain/items", files=files[:3]).status_code == 200
        before = {mode: _search(client, "photos", text="a blue square", k=6, mode=mode) for mode in ("binary", "two_stage")}
    with TestClient(create_app(settings)) as client:
        assert {mode: _search(client, "photos", text="a blue square", k=6, mode=mode) for mode in ("binary", "two_stage")} == before
    # the folder changes under the collection: the service still starts, says why it is not fully ready,
    # and the collections of other encoders keep answering
    with (onnx_dir / "tiny-clip" / "image.onnx").open("ab") as handle:
        handle.write(b"\0")
    with TestClient(create_app(settings)) as client:
        ready = client.get("/readyz")
        assert ready.status_code == 503 and "sha256" in ready.text
        assert len(_search(client, "plain", item_id="img-0.png", k=2)) == 2
        response = client.post("/v1/collections/photos/search", json={"text": "a blue square", "k": 3})
        assert response.status_code == 422 and response.json()["error"]["details"]["problem"] == "checksum"
    shutil.rmtree(onnx_dir)


def test_a_trained_checkpoint_lists_its_training_data_s_licence(service):
    import json

    from app.encoders.registry import ASSETS

    rows = {row["name"]: row for row in service["client"].get("/v1/encoders").json()["data"]}
    recorded = 0
    for config_path in ASSETS.glob("*/config.json"):
        config = json.loads(config_path.read_text())
        licence = config.get("licence") or (config.get("data") or {}).get("licence")
        name = config.get("name", config_path.parent.name)
        if licence and name in rows and rows[name]["source"] == str(config_path.parent):
            assert rows[name]["licence"] == licence
            recorded += 1
    assert recorded  # at least one shipped checkpoint records its data's licence
    assert rows["audio-baseline"]["licence"] == "Apache-2.0"
