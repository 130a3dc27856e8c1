"""Safe upgrades: each collection records its encoder's checkpoint version and keeps answering with it.

Two tiny checkpoints share one name and differ in version and weights. A collection built with v1
keeps using v1 after v2 becomes the default (while v1's directory is still available), a new
collection gets v2, and without v1 the old collection answers a clear 409 and changes nothing:
codes from two checkpoints never meet in one index.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from fastapi.testclient import TestClient

from app.cli.reembed import reembed
from app.encoders.checkpoint import save_checkpoint
from app.encoders.registry import discover
from app.main import create_app
from app.training.audio.train import TrainConfig, build_model, model_config
from recall import RecallClient
from tests.conftest import make_settings

NAME = "tiny-speech"


def _checkpoint(directory: Path, version: str | None, seed: int) -> Path:
    torch.manual_seed(seed)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name=NAME, bits=32,
                      sample_rate=16000, window_s=0.5, hop_s=0.25, hidden=8, heads=2, d_a=6)
    config = model_config(cfg)
    if version is not None:
        config["version"] = version
    _, net = build_model(config)
    return save_checkpoint(directory, net.state_dict(), config)


def _wav(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buffer = io.BytesIO()
    sf.write(buffer, (0.2 * rng.standard_normal(8000)).astype(np.float32), 16000, format="WAV")
    return buffer.getvalue()


def _settings(tmp_path: Path, overrides: dict, *dirs: Path):
    return make_settings(tmp_path, encoders={"default_audio": NAME, "default_image": "image-baseline",
                                             "extra_dirs": [str(d) for d in dirs]}, **overrides)


def _ingest(client: TestClient, collection: str, seeds: range) -> None:
    files = [("files", (f"c{s}.wav", _wav(s), "audio/wav")) for s in seeds]
    metadata = json.dumps([{"take": s} for s in seeds])
    response = client.post(f"/v1/collections/{collection}/items", files=files,
                           data={"ids": ",".join(f"c{s}" for s in seeds), "metadata": metadata})
    assert response.status_code in (200, 201), response.text


def _search(client: TestClient, collection: str, seed: int) -> list[tuple[str, float]]:
    response = client.post(f"/v1/collections/{collection}/search", files={"file": ("q.wav", _wav(seed), "audio/wav")},
                           data={"k": "5", "mode": "float"})
    assert response.status_code == 200, response.text
    return [(hit["id"], round(hit["distance"], 5)) for hit in response.json()["results"]]


def test_registry_lists_each_checkpoint_under_its_version(tmp_path: Path) -> None:
    v1 = _checkpoint(tmp_path / "v1", "1", seed=0)
    unversioned = _checkpoint(tmp_path / "digest", None, seed=0)
    specs = discover([v1])
    assert specs[NAME].version == "1" and specs[f"{NAME}@1"] is specs[NAME]
    # no version in the config: a digest of the weights, the same for the same weights
    digest = discover([unversioned])[NAME].version
    assert len(digest) == 12 and digest == discover([unversioned])[NAME].version


def test_collection_keeps_its_checkpoint_after_the_default_changes(tmp_path: Path, backend_overrides: dict) -> None:
    v1 = _checkpoint(tmp_path / "ckpt-v1", "1", seed=0)
    v2 = _checkpoint(tmp_path / "ckpt-v2", "2", seed=1)

    with TestClient(create_app(_settings(tmp_path, backend_overrides, v1))) as client:
        assert client.post("/v1/collections", json={"name": "old", "modality": "audio"}).status_code == 201
        _ingest(client, "old", range(6))
        before = _search(client, "old", 3)
        info = client.get("/v1/collections/old").json()
        assert info["encoder"] == NAME and info["encoder_version"] == "1"

    # v2 is now the default (listed last), v1 is still available: the old collection answers as before
    with TestClient(create_app(_settings(tmp_path, backend_overrides, v1, v2))) as client:
        assert _search(client, "old", 3) == before
        _ingest(client, "old", range(6, 8))  # new items of the old collection are embedded by v1 too
        assert [hit for hit in _search(client, "old", 3) if hit[0] == "c3"] == [("c3", 0.0)]
        assert client.post("/v1/collections", json={"name": "new", "modality": "audio"}).status_code == 201
        assert client.get("/v1/collections/new").json()["encoder_version"] == "2"
        encoders = {row["name"] for row in client.get("/v1/encoders").json()["data"]}
        assert NAME in encoders and not any("@" in name for name in encoders)
        # the explicit upgrade: copy the old collection into one embedded by v2, from the stored originals
        recall = RecallClient("http://testserver")
        recall.http = client  # the TestClient is an httpx.Client bound to this app
        report = reembed(recall, "old", "old-v2")
        assert report == {"source": "old", "target": "old-v2", "copied": 8, "already_there": 0, "without_media": [], "failed": []}
        assert reembed(recall, "old", "old-v2")["already_there"] == 8  # a second run resumes, copies nothing
        upgraded = client.get("/v1/collections/old-v2").json()
        assert upgraded["encoder_version"] == "2" and upgraded["items"] == 8 and upgraded["window_s"] == info["window_s"]
        assert [hit for hit in _search(client, "old-v2", 3) if hit[0] == "c3"] == [("c3", 0.0)]
        assert client.get("/v1/collections/old-v2/items/c2").json()["metadata"] == client.get("/v1/collections/old/items/c2").json()["metadata"]

    # v1 gone: a clear 409 naming the version and what to do; the collection's items are untouched
    with TestClient(create_app(_settings(tmp_path, backend_overrides, v2))) as client:
        response = client.post("/v1/collections/old/search", files={"file": ("q.wav", _wav(3), "audio/wav")})
        assert response.status_code == 409
        message = response.json()["error"]["message"]
        assert "version 1" in message and "RECALL_ENCODERS__EXTRA_DIRS" in message
        response = client.post("/v1/collections/old/items", files=[("files", ("x.wav", _wav(9), "audio/wav"))])
        assert response.status_code == 409
        assert client.get("/v1/collections/old").json()["items"] == 8
        assert _search(client, "old-v2", 3)[0] == ("c3", 0.0)  # the re-embedded copy answers
