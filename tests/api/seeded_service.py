"""The small seeded service the bad-input tests run against (tests/api/test_bad_input.py, test_fuzz_regressions.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import make_settings, tone_wav


@pytest.fixture
def seeded(tmp_path, backend_overrides):
    settings = make_settings(tmp_path, limits={"max_upload_bytes": 400_000, "max_audio_seconds": 5.0, "max_image_pixels": 10_000},
                             **backend_overrides)
    with TestClient(create_app(settings)) as client:
        client.post("/v1/collections", json={"name": "a", "modality": "audio"})
        client.post("/v1/collections", json={"name": "img", "modality": "image"})
        client.post("/v1/collections/a/items", files=[("files", ("keep.wav", tone_wav()))])
        yield client


def _snapshot(client):
    return [(c["name"], c["items"], c["segments"], c["indexed_segments"]) for c in client.get("/v1/collections").json()["data"]]
