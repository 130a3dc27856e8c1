"""bench.image.minilm_kernels times the product it means to: each form's graph computes x @ W of its codes."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from bench.image.minilm_kernels import FORMS, layer_estimate_us, product_graph


def _weights(operator: str, bits: int, block: int, k: int, n: int) -> np.ndarray:
    """The (k, n) float weight ``product_graph`` encodes, decoded from the same seeded codes in numpy."""
    rng = np.random.default_rng(0)
    if operator == "DynamicQuantizeMatMul":
        codes = rng.integers(-127, 128, (k, n), dtype=np.int8)
        return codes.astype(np.float64) * (rng.random(n, dtype=np.float32).astype(np.float64) * 0.01)
    packed = rng.integers(0, 256, (n, k // block, block * bits // 8), dtype=np.uint8)
    scales = (rng.random(n * (k // block), dtype=np.float32) * 0.01).reshape(n, k // block, 1)
    if bits == 4:  # two codes a byte, the low nibble first; zero point 8
        codes = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(n, k // block, block).astype(np.float64) - 8
    else:  # zero point 128
        codes = packed.astype(np.float64) - 128
    return (codes * scales).reshape(n, k).T


@pytest.mark.parametrize("name,operator,bits,block,accuracy", [f for f in FORMS if f[4] == 0])
def test_each_float_input_form_multiplies_by_its_decoded_weights(name, operator, bits, block, accuracy) -> None:
    k, n = 64, 48
    session = onnxruntime.InferenceSession(product_graph(operator, bits, block, accuracy, k, n), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(3).standard_normal((5, k)).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    expected = x.astype(np.float64) @ _weights(operator, bits, block, k, n)
    tolerance = 0.02 if operator == "DynamicQuantizeMatMul" else 1e-4  # its input is rounded to uint8 per tensor
    np.testing.assert_allclose(y, expected, rtol=0, atol=tolerance * np.abs(expected).max())


def test_a_layer_is_four_attention_sized_products_and_the_two_feed_forward_ones() -> None:
    assert layer_estimate_us({"attention": 10.0, "intermediate": 30.0, "output": 25.0}) == 95.0
