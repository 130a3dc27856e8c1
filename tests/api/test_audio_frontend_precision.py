"""The service applies ``encoders.audio_frontend_precision`` at start, and query-by-example answers on either
precision: a demo word finds itself first among the demo words (issue 35: int8 is opt-in)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from app.features.pretrained.ort_convs import precision, set_precision
from app.main import create_app
from app.settings import Settings
from tests.conftest import make_settings

WORDS = sorted((Path(__file__).resolve().parents[2] / "app" / "assets" / "demo" / "words").glob("*.flac"))[:6]


@pytest.mark.parametrize("chosen", ["float32", "int8"])
def test_the_setting_chooses_the_front_end_and_search_answers(tmp_path, chosen: str) -> None:
    settings = make_settings(tmp_path, encoders={"default_audio": "general-audio", "default_image": "image-baseline",
                                                 "audio_frontend_precision": chosen})
    try:
        with TestClient(create_app(settings)) as client:
            assert precision() == chosen
            assert client.post("/v1/collections", json={"name": "w", "modality": "audio"}).status_code == 201
            files = [("files", (p.name, p.read_bytes())) for p in WORDS]
            assert client.post("/v1/collections/w/items", files=files).status_code == 200
            query = WORDS[2]
            answer = client.post("/v1/collections/w/search", files={"file": (query.name, query.read_bytes())})
            assert answer.status_code == 200, answer.text
            assert answer.json()["results"][0]["id"] == query.name
    finally:
        set_precision("float32")  # process-wide: leave the default for the next test


def test_the_setting_is_validated() -> None:
    assert Settings().encoders.audio_frontend_precision == "float32"  # int8 missed issue 35's rule: opt-in
    with pytest.raises(ValidationError):
        Settings(encoders={"audio_frontend_precision": "int4"})
