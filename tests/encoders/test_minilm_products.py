"""The lean MiniLM's matrix products: half-precision weights on CPU, oneDNN's packed float32 weights
where that is unavailable or disagrees, ``F.linear`` otherwise; each checked against a float64
reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from app.encoders import half_weights

from app.encoders.image_text import minilm_lean
from app.encoders.image_text.minilm_lean import _Product


def _weights(out_features: int = 48, in_features: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    weight = torch.randn(out_features, in_features, generator=g) * 0.1
    bias = torch.randn(out_features, generator=g) * 0.1
    x = torch.randn(2, 5, in_features, generator=g)  # (sentences, tokens, hidden), as the forward passes it
    return weight, bias, x


def _reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, gelu: bool) -> torch.Tensor:
    reference = x.double() @ weight.double().T + bias.double()
    if gelu:  # BERT's exact GELU: x * Phi(x)
        reference = 0.5 * reference * (1 + torch.erf(reference / 2**0.5))
    return reference


@pytest.mark.parametrize("gelu", [False, True])
def test_half_product_matches_a_float64_reference_of_the_rounded_weight(gelu: bool) -> None:
    weight, bias, x = _weights()
    product = _Product(weight, bias, gelu=gelu)

    assert product.half is not None and product.packed is None and product.weight is None  # one copy, in half
    rounded = weight.half().float()
    torch.testing.assert_close(product(x).double(), _reference(x, rounded, bias, gelu), rtol=1e-5, atol=1e-5)
    # and within half precision's rounding of the float32 weight's product
    torch.testing.assert_close(product(x).double(), _reference(x, weight, bias, gelu), rtol=2e-3, atol=2e-3)
    assert product(x).shape == (2, 5, 48)


@pytest.mark.parametrize("gelu", [False, True])
def test_packed_product_matches_a_float64_reference(gelu: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(minilm_lean, "_half", lambda weight, bias: None)  # as where the half kernel is unavailable
    weight, bias, x = _weights()
    product = _Product(weight, bias, gelu=gelu)

    torch.testing.assert_close(product(x).double(), _reference(x, weight, bias, gelu), rtol=1e-5, atol=1e-5)
    if torch.backends.mkldnn.is_available():
        assert product.packed is not None  # the oneDNN path is the one being checked here
        assert product.weight is None  # and the plain copy was not kept beside it


def test_a_half_product_that_disagrees_at_build_falls_back_to_float32(monkeypatch: pytest.MonkeyPatch) -> None:
    weight, bias, x = _weights()
    monkeypatch.setattr(half_weights.HalfLinear, "__call__", lambda self, rows: np.zeros((len(rows), 48), np.float32))

    product = _Product(weight, bias)

    assert product.half is None
    torch.testing.assert_close(product(x), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_a_packed_product_that_disagrees_at_build_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    weight, bias, x = _weights()
    monkeypatch.setattr(minilm_lean, "_half", lambda weight, bias: None)
    monkeypatch.setattr(minilm_lean, "_onednn", lambda x, packed, bias, gelu: torch.zeros(x.shape[0], bias.shape[0]))

    product = _Product(weight, bias)

    assert product.packed is None
    torch.testing.assert_close(product(x), F.linear(x, weight, bias))


def test_other_dtypes_take_the_plain_product() -> None:
    weight, bias, x = _weights()
    product = _Product(weight.double(), bias.double(), gelu=True)

    assert product.half is None and product.packed is None
    torch.testing.assert_close(product(x.double()), F.gelu(F.linear(x.double(), weight.double(), bias.double())))
