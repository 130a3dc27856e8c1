"""The committed default image-text checkpoint loads through the registry and retrieves scenes."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders import registry
from app.training.synthesis.images import generate_scenes, render

DEFAULT = "image-text-minilm"


@pytest.fixture(scope="module")
def encoder():
    specs = registry.discover()
    assert DEFAULT in specs, f"default checkpoint missing; registry lists {sorted(specs)}"
    return registry.create_encoder(DEFAULT, specs)


def test_default_checkpoint_gives_valid_shapes(encoder) -> None:
    assert encoder.modality == "image" and encoder.supports_text and encoder.supports_rerank
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=shape, dtype=np.uint8) for shape in [(256, 256, 3), (120, 300, 3), (500, 90, 3)]]
    emb = encoder.encode(images)
    assert emb.floats.shape == (3, encoder.dim) and emb.codes.shape == (3, encoder.bits // 8)
    np.testing.assert_allclose(np.linalg.norm(emb.floats, axis=1), 1.0, atol=1e-5)
    text = encoder.encode_text(["a red circle", "two dogs on a beach"])
    assert text.floats.shape == (2, encoder.dim) and text.codes.shape == (2, encoder.bits // 8)
    np.testing.assert_allclose(np.linalg.norm(text.floats, axis=1), 1.0, atol=1e-5)
    scores = encoder.rerank("a red circle", emb.floats)
    assert scores.shape == (3,) and np.all((scores >= 0) & (scores <= 1))
    assert encoder.rerank("a red circle", emb.floats[:0]).shape == (0,)
    assert encoder.describe()["text_features"] == "minilm"


def test_default_checkpoint_retrieves_unseen_generated_scenes(encoder) -> None:
    # 40 scenes from a seed training never used; chance puts the right image at rank ~20.
    # The checkpoint's validation R@10 on such scenes is in its metrics.json; this only guards
    # against a broken or swapped checkpoint, so the bar sits far below that and far above chance.
    scenes = generate_scenes(40, seed=987_654)
    images = encoder.encode([render(s) for s in scenes]).floats
    queries = encoder.encode_text([s.captions[0] for s in scenes]).floats
    scores = queries @ images.T
    ranks = (scores > np.diag(scores)[:, None]).sum(axis=1) + 1
    assert np.median(ranks) <= 5
    reranked = np.stack([encoder.rerank(s.captions[0], images) for s in scenes])
    rerank_ranks = (reranked > np.diag(reranked)[:, None]).sum(axis=1) + 1
    assert np.median(rerank_ranks) <= 5
