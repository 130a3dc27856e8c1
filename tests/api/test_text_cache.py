"""A repeated text query is answered from the image-text encoder's embedding cache: same answer, no MiniLM call,
and the hits and misses are in /metrics (issue 35: a cache of repeated query strings with a hit-rate metric)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.encoders.image_text import text_features
from app.main import create_app
from app.training.synthesis.images import render
from tests.api.test_text_search import ENCODER, OBJECTS, _png, _scene
from tests.conftest import make_settings


def _metric(client: TestClient, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{encoder="{ENCODER}"}}'):
            return float(line.split()[-1])
    return 0.0  # not loaded yet: no row


def test_the_second_identical_query_skips_minilm_answers_the_same_and_is_counted(tmp_path, monkeypatch) -> None:
    settings = make_settings(tmp_path, encoders={"default_audio": "audio-baseline", "default_image": ENCODER})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "s", "modality": "image", "encoder": ENCODER}).status_code == 201
        files = [("files", (f"{c}-{s}.png", _png(render(_scene(s, c, seed=i))))) for i, (s, c) in enumerate(OBJECTS)]
        assert client.post("/v1/collections/s/items", files=files).status_code == 200
        body = {"text": "a large blue square", "k": 3}  # re-ranked: stage 1 and the head both need the text
        first = client.post("/v1/collections/s/search", json=body).json()
        hits, misses = _metric(client, "recall_text_cache_hits"), _metric(client, "recall_text_cache_misses")
        assert misses >= 1 and hits >= 1  # the first query: embedded once, found again by the re-ranker
        calls = []
        for kind in ("MiniLMFeatures", "TfidfFeatures"):  # whichever sentence features the checkpoint uses
            if hasattr(text_features, kind):
                original = getattr(text_features, kind).__call__
                monkeypatch.setattr(getattr(text_features, kind), "__call__",
                                    lambda self, texts, original=original: calls.append(list(texts)) or original(self, texts))
        second = client.post("/v1/collections/s/search", json=body).json()
        assert second["results"] == first["results"] and calls == []  # from the cache
        assert _metric(client, "recall_text_cache_hits") == hits + 2 and _metric(client, "recall_text_cache_misses") == misses
        client.post("/v1/collections/s/search", json={**body, "text": "a large red circle"})
        assert calls == [["a large red circle"]] and _metric(client, "recall_text_cache_misses") == misses + 1
