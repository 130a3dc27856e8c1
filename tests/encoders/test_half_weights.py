"""The half-weight product against a float64 brute force of the same (half-rounded) weights."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders.half_weights import HalfLinear


@pytest.mark.parametrize("m, k, n", [(1, 8, 1), (3, 17, 5), (12, 384, 1152), (7, 1536, 386), (20, 64, 6)])
@pytest.mark.parametrize("with_bias", [True, False])
def test_matches_a_float64_product_of_the_rounded_weights(m: int, k: int, n: int, with_bias: bool) -> None:
    rng = np.random.default_rng(m * 1000 + k + n)
    weight = (rng.standard_normal((n, k)) * 0.05).astype(np.float32)
    bias = (rng.standard_normal(n) * 0.1).astype(np.float32) if with_bias else None
    x = rng.standard_normal((m, k)).astype(np.float32)
    product = HalfLinear(weight, bias)
    rounded = weight.astype(np.float16).astype(np.float64)
    want = x.astype(np.float64) @ rounded.T + (bias if bias is not None else 0.0)
    got = product(x)
    assert got.shape == (m, n) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    # the rounding is what half precision gives: never more than 2^-11 of a weight
    assert np.all(np.abs(product.rounded_weight - weight) <= np.abs(weight) * 2.0**-11 + 2.0**-25)


def test_widening_is_exact_for_every_finite_half() -> None:
    every = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    finite = every[np.isfinite(every)].astype(np.float32)  # zeros, subnormals, up to the largest half
    product = HalfLinear(finite[:, None], None)  # (N, 1): out[0, i] = 1 * finite[i]
    got = product(np.ones((1, 1), np.float32))[0]
    np.testing.assert_array_equal(got, finite)


def test_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(ValueError, match="half range"):
        HalfLinear(np.array([[70000.0]], np.float32), None)
    with pytest.raises(ValueError, match="finite"):
        HalfLinear(np.array([[np.nan]], np.float32), None)
    with pytest.raises(ValueError, match="bias"):
        HalfLinear(np.ones((2, 3), np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="inputs"):
        HalfLinear(np.ones((2, 3), np.float32), None)(np.ones((1, 4), np.float32))
