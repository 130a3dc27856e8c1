"""The lean MiniLM's matrix products: oneDNN's packed weights where usable, ``F.linear`` otherwise,
and the same numbers either way (checked against a float64 reference)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from app.encoders import minilm_lean
from app.encoders.minilm_lean import _Product


def _weights(out_features: int = 48, in_features: int = 32) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    weight = torch.randn(out_features, in_features, generator=g) * 0.1
    bias = torch.randn(out_features, generator=g) * 0.1
    x = torch.randn(2, 5, in_features, generator=g)  # (sentences, tokens, hidden), as the forward passes it
    return weight, bias, x


@pytest.mark.parametrize("gelu", [False, True])
def test_product_matches_a_float64_reference(gelu: bool) -> None:
    weight, bias, x = _weights()
    reference = x.double() @ weight.double().T + bias.double()
    if gelu:  # BERT's exact GELU: x * Phi(x)
        reference = 0.5 * reference * (1 + torch.erf(reference / 2**0.5))

    product = _Product(weight, bias, gelu=gelu)

    torch.testing.assert_close(product(x).double(), reference, rtol=1e-5, atol=1e-5)
    if torch.backends.mkldnn.is_available():
        assert product.packed is not None  # the fast path is the one being checked here
        assert product.weight is None  # and the plain copy was not kept beside it


def test_a_packed_product_that_disagrees_at_build_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    weight, bias, x = _weights()
    monkeypatch.setattr(minilm_lean, "_onednn", lambda x, packed, bias, gelu: torch.zeros(x.shape[0], bias.shape[0]))

    product = _Product(weight, bias)

    assert product.packed is None
    torch.testing.assert_close(product(x), F.linear(x, weight, bias))


def test_other_dtypes_take_the_plain_product() -> None:
    weight, bias, x = _weights()
    product = _Product(weight.double(), bias.double(), gelu=True)

    assert product.packed is None
    torch.testing.assert_close(product(x.double()), F.gelu(F.linear(x.double(), weight.double(), bias.double())))
