"""Each loss term of papers 000 and 004 against a value worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from app.training.losses import (
    HashLossWeights,
    contrastive_loss,
    hashing_objective,
    penalisation,
    quantisation,
    triplet_loss,
)


def test_contrastive_loss_hand_computed() -> None:
    # both pairs at distance ||(3, 4)|| = 5. Same pair: 1/2 * 5^2 = 12.5.
    # Different pair with margin 6: 1/2 * (6 - 5)^2 = 0.5. Mean = 6.5.
    x1 = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
    x2 = torch.tensor([[3.0, 4.0], [4.0, 5.0]])
    same = torch.tensor([1, 0])
    assert float(contrastive_loss(x1, x2, same, margin=6.0)) == pytest.approx(6.5)
    # a different pair beyond the margin costs nothing: (12.5 + 0) / 2
    assert float(contrastive_loss(x1, x2, same, margin=1.0)) == pytest.approx(6.25)


def test_penalisation_hand_computed() -> None:
    # A = [[1, 0], [.5, .5]]: A A^T = [[1, .5], [.5, .5]]; minus I: [[0, .5], [.5, -.5]] -> 3 * .25
    attention = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    assert float(penalisation(attention)) == pytest.approx(0.75)
    # disjoint one-hot heads are orthonormal: no penalty
    assert float(penalisation(torch.eye(3)[None])) == pytest.approx(0.0)


def test_triplet_loss_hand_computed() -> None:
    # Dc(p, a) = 1 - cos 45deg = 1 - 1/sqrt(2); Dc(n, a) = 1 - cos 90deg = 1
    a, p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 2.0]])
    assert float(triplet_loss(a, p, n, margin=1.0)) == pytest.approx(1.0 + (1 - 1 / math.sqrt(2)) - 1.0, abs=1e-6)
    assert float(triplet_loss(a, p, n, margin=0.5)) == 0.0  # 0.5 + 0.293 - 1 < 0


def test_quantisation_hand_computed() -> None:
    # || |f| - 1 ||_1: a -> .5 + 0, p -> 1 + .1, n -> 0; sum over the triplet = 1.6
    a, p, n = torch.tensor([[0.5, -1.0]]), torch.tensor([[0.0, 0.9]]), torch.tensor([[1.0, -1.0]])
    assert float(quantisation(a, p, n)) == pytest.approx(1.6)


def test_hashing_objective_combines_terms_with_paper_weights() -> None:
    a, p, n = torch.tensor([[1.0, 0.0]]), torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 2.0]])
    attention = torch.tensor([[[1.0, 0.0], [0.5, 0.5]]])
    weights = HashLossWeights(margin=1.0)
    assert (weights.alpha, weights.beta, weights.gamma) == (0.01, 1.0, 0.01)
    terms = hashing_objective((a, p, n), (attention, attention, attention), weights)
    t = 1 - 1 / math.sqrt(2)
    q = (0 + 1) + (0 + 0) + (1 + 1)  # | |f| - 1 | summed: a (0, 1), p (0, 0), n (1, 1)
    assert float(terms["penalisation"]) == pytest.approx(0.75)
    assert float(terms["triplet"]) == pytest.approx(t, abs=1e-6)
    assert float(terms["quantisation"]) == pytest.approx(q)
    assert float(terms["total"]) == pytest.approx(0.01 * 0.75 + t + 0.01 * q, abs=1e-6)
