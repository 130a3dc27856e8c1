"""Text search over HTTP with the default image-text encoder: the described scene comes first."""

from __future__ import annotations

import io

import numpy as np
import pytest
from fastapi.testclient import TestClient
from PIL import Image

from app.main import create_app
from app.training.synthesis.images import Scene, render
from tests.conftest import make_settings

ENCODER = "image-text-minilm"
# Six scenes that differ in shape and colour (the main object every caption names).
OBJECTS = [("circle", "red"), ("square", "blue"), ("triangle", "yellow"), ("star", "green"), ("cross", "white"),
           ("circle", "purple")]


def _scene(shape: str, colour: str, seed: int) -> Scene:
    background = "grey" if colour != "grey" else "black"
    return Scene(shape=shape, colour=colour, count=1, position="centre", size="large", background=background,
                 texture="plain", seed=seed)


def _png(image: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("text_search"),
                             encoders={"default_audio": "audio-baseline", "default_image": ENCODER})
    with TestClient(create_app(settings)) as test_client:
        response = test_client.post("/v1/collections", json={"name": "scenes", "modality": "image", "encoder": ENCODER})
        assert response.status_code in (200, 201), response.text
        files = [("files", (f"{colour}-{shape}.png", _png(render(_scene(shape, colour, seed=i)))))
                 for i, (shape, colour) in enumerate(OBJECTS)]
        response = test_client.post("/v1/collections/scenes/items", files=files)
        assert response.status_code == 200, response.text
        test_client.data_dir = settings.data_dir  # type: ignore[attr-defined]
        yield test_client


@pytest.mark.parametrize(("shape", "colour"), OBJECTS)
def test_text_query_finds_the_described_scene_first(client, shape, colour) -> None:
    response = client.post("/v1/collections/scenes/search", json={"text": f"a large {colour} {shape}", "k": 3})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[0]["id"] == f"{colour}-{shape}.png"
    # re-ranking is on by default: both stage scores are reported, and the order is the head's
    assert all("stage1_score" in r and "rerank_score" in r for r in results)
    assert [r["rerank_score"] for r in results] == sorted((r["rerank_score"] for r in results), reverse=True)


def test_stage1_only_search_also_ranks_the_described_scene_first(client) -> None:
    response = client.post("/v1/collections/scenes/search",
                           json={"text": "a large yellow triangle", "k": 3, "rerank": False})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert results[0]["id"] == "yellow-triangle.png"
    assert "rerank_score" not in results[0]


def test_rerank_scores_are_the_heads_on_each_results_stored_vector(client) -> None:
    """The head re-scores the vectors the two-stage search read (issue 35: not gathered a second time);
    they must be the stored images' vectors: the scores equal the head applied to the catalog's rows."""
    text = "a large blue square"
    response = client.post("/v1/collections/scenes/search", json={"text": text, "k": len(OBJECTS)})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert len(results) == len(OBJECTS)
    from app.encoders.registry import create_encoder, discover
    from app.storage.protocol import open_catalog

    encoder = create_encoder(ENCODER, discover())
    catalog = open_catalog(None, client.data_dir)
    try:
        stored = np.stack([catalog.item_segments("scenes", r["id"], encoder.dim, encoder.bits)[2][0] for r in results])
    finally:
        catalog.close()
    np.testing.assert_allclose([r["rerank_score"] for r in results], encoder.rerank(text, stored), rtol=0, atol=1e-6)


def test_a_reranked_search_answers_as_the_rerank_batcher_did(client) -> None:
    """Issue 35 moved the head onto the search's own worker thread (app/usecases/query.py ``_reranked``);
    the answers must be those of the way before, stage 1 then the rerank batcher, score for score."""
    from app.search.pipeline import Query, SearchOptions, search

    services = client.app_state["services"]
    state = services.state("scenes")
    key = state.collection.encoder_key
    for shape, colour in OBJECTS[:3]:
        text = f"a small {colour} {shape} on grey"
        response = client.post("/v1/collections/scenes/search", json={"text": text, "k": 4})
        assert response.status_code == 200, response.text
        got = [(r["id"], r["rerank_score"], r["stage1_score"]) for r in response.json()["results"]]

        async def batcher_way(text=text):
            emb = await services.encoders.encode_text(key, [text])
            query = Query(floats=emb.floats, codes=emb.codes, text=text)
            hits = await search(services.catalog, state.collection, state.index, state.scans, query,
                                SearchOptions(k=100, oversample=services.settings.index.oversample))
            scores = await services.encoders.rerank(key, text, np.stack([h.vector for h in hits]))
            ranked = sorted(zip(hits, scores.tolist()), key=lambda p: (-p[1], p[0].item_id))[:4]
            return [(h.item_id, s, 1.0 - h.distance) for h, s in ranked]

        assert got == client.portal.call(batcher_way)
