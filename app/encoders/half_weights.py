"""``x @ weight.T + bias`` with the weight stored as IEEE half floats, summed in float32.

Why: a text query's 24 MiniLM products (a dozen tokens each) are bound by reading the weights,
42 MB of float32 per sentence, not by arithmetic; this AVX2 CPU has no half or bfloat16
arithmetic, so torch's own half products are slower than float32. This kernel reads half the
bytes and widens four weight rows at a time to float32 in a small buffer that every token reads:
MiniLM's 24 products for a 12-token sentence, isolated on one core of the quiet 2-core machine,
took 6.1 ms against 9.0-9.6 ms for oneDNN's packed float32 (interleaved; app/encoders/image_text/minilm_lean.py
has the whole-sentence and quality numbers). A weight rounds to half with a relative error of at
most 2^-11.

The widening is exact for every finite half, subnormals included: the half's exponent and
mantissa bits are moved into a float32 and scaled by 2^112 (the exponent bias difference).
"""

from __future__ import annotations

import numpy as np
from numba import njit

_ROWS = 4  # weight rows per pass: each token row is read once per four outputs
_SCALE = np.float32(2.0**112)


@njit(nogil=True, cache=True, fastmath=True, boundscheck=False)
def _linear_half(x: np.ndarray, weight_bits: np.ndarray, bias: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    m, k = x.shape
    n = weight_bits.shape[0]
    rows = np.empty((_ROWS, k), np.uint32)
    widened = rows.view(np.float32)
    for first in range(0, n, _ROWS):
        count = min(_ROWS, n - first)
        for r in range(count):
            for j in range(k):
                h = np.uint32(weight_bits[first + r, j])
                rows[r, j] = ((h & np.uint32(0x7FFF)) << np.uint32(13)) | ((h & np.uint32(0x8000)) << np.uint32(16))
        for r in range(count, _ROWS):  # a last pass of fewer rows multiplies zeros
            for j in range(k):
                rows[r, j] = np.uint32(0)
        # two tokens per pass over k: each widened weight loaded once feeds two sums (~10% faster
        # than one token per pass for a 12-token sentence, isolated); an odd count's last token
        # pairs with itself and its second sums are not written
        for i in range(0, m, 2):
            i2 = min(i + 1, m - 1)
            a0 = np.float32(0.0)
            a1 = np.float32(0.0)
            a2 = np.float32(0.0)
            a3 = np.float32(0.0)
            b0 = np.float32(0.0)
            b1 = np.float32(0.0)
            b2 = np.float32(0.0)
            b3 = np.float32(0.0)
            for j in range(k):
                u = x[i, j]
                v = x[i2, j]
                w0 = widened[0, j]
                w1 = widened[1, j]
                w2 = widened[2, j]
                w3 = widened[3, j]
                a0 += u * w0
                a1 += u * w1
                a2 += u * w2
                a3 += u * w3
                b0 += v * w0
                b1 += v * w1
                b2 += v * w2
                b3 += v * w3
            first_sums = (a0, a1, a2, a3)
            second_sums = (b0, b1, b2, b3)
            for r in range(count):
                out[i, first + r] = first_sums[r] * _SCALE + bias[first + r]
                if i2 != i:
                    out[i2, first + r] = second_sums[r] * _SCALE + bias[first + r]


class HalfLinear:
    """One product with a half-precision copy of ``weight`` (N, K) and a float32 ``bias`` (N,) or None."""

    def __init__(self, weight: np.ndarray, bias: np.ndarray | None) -> None:
        weight = np.asarray(weight, dtype=np.float32)
        if weight.ndim != 2 or not np.isfinite(weight).all():
            raise ValueError(f"the weight must be a finite (N, K) matrix, got shape {weight.shape}")
        with np.errstate(over="ignore"):
            halves = weight.astype(np.float16)
        if not np.isfinite(halves).all():
            raise ValueError(f"weights beyond half range (|w| > 65504): largest {np.abs(weight).max()}")
        self.weight_bits = np.ascontiguousarray(halves.view(np.uint16))
        self.bias = (np.zeros(weight.shape[0], np.float32) if bias is None
                     else np.ascontiguousarray(np.asarray(bias, dtype=np.float32)))
        if self.bias.shape != (weight.shape[0],):
            raise ValueError(f"bias of shape {self.bias.shape} for {weight.shape[0]} outputs")

    @property
    def rounded_weight(self) -> np.ndarray:
        """The weight as the kernel sees it (float32 of the half values)."""
        return self.weight_bits.view(np.float16).astype(np.float32)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """(M, K) float32 rows -> (M, N)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.weight_bits.shape[1]:
            raise ValueError(f"expected (M, {self.weight_bits.shape[1]}) inputs, got {x.shape}")
        out = np.empty((x.shape[0], self.weight_bits.shape[0]), np.float32)
        _linear_half(x, self.weight_bits, self.bias, out)
        return out
