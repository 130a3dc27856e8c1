"""Towers, head and losses of the block network, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from app.encoders.image_text.model import (
    ImageTower,
    RelevanceHead,
    TextTower,
    head_loss,
    prepare,
    ranking_loss,
    to_tensor,
)
from app.training.synthesis.images import generate_scenes, render


def test_image_tower_gives_unit_vectors_of_dim() -> None:
    torch.manual_seed(0)
    tower = ImageTower(dim=24, width=8).eval()
    images = np.stack([prepare(render(s)) for s in generate_scenes(3, seed=0)])
    with torch.no_grad():
        out = tower(to_tensor(images))
    assert out.shape == (3, 24)
    assert torch.allclose(out.norm(dim=1), torch.ones(3), atol=1e-5)
    assert tower.pooled(to_tensor(images)).shape == (3, tower.feature_dim)


def test_text_tower_gives_unit_vectors_of_dim() -> None:
    torch.manual_seed(0)
    tower = TextTower(text_dim=384, dim=24).eval()
    out = tower(torch.randn(5, 384))
    assert out.shape == (5, 24)
    assert torch.allclose(out.norm(dim=1), torch.ones(5), atol=1e-5)


def test_prepare_squashes_any_size_to_the_centre_crop() -> None:
    image = np.zeros((100, 300, 3), np.uint8)
    image[:, :150] = 255  # left half white: squashing keeps it the left half
    crop = prepare(image)
    assert crop.shape == (224, 224, 3)
    assert crop[:, :100].min() == 255 and crop[:, 124:].max() == 0
    with pytest.raises(ValueError):
        prepare(np.zeros((10, 10), np.uint8))


def test_head_starts_as_a_monotone_function_of_the_cosine() -> None:
    # the last MLP layer starts at zero, so relevance = sigmoid(10 * cos - 5) exactly
    head = RelevanceHead(dim=2)
    image = torch.tensor([[1.0, 0.0], [0.6, 0.8]])
    text = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    expected = torch.sigmoid(torch.tensor([10 * 1.0 - 5, 10 * 0.6 - 5]))
    assert torch.allclose(head(image, text), expected, atol=1e-6)


def test_head_loss_on_a_hand_computed_case() -> None:
    head = RelevanceHead(dim=2)
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    # predicted[i, j] = head(image j, text i): cos is 1 on the diagonal and 0 off it, so
    # diagonal sigmoid(5) = 0.9933071, off-diagonal sigmoid(-5) = 0.0066929.
    labels = torch.tensor([[1.0, 0.66], [0.0, 1.0]])
    p_hi, p_lo = 1 / (1 + math.exp(-5)), 1 / (1 + math.exp(5))
    per_class = {
        1.0: (1 - p_hi) ** 2,  # both diagonal pairs: 4.4797e-5
        0.66: (0.66 - p_lo) ** 2,  # 0.4268
        0.0: (0 - p_lo) ** 2,  # 4.4797e-5
    }
    expected = sum(per_class.values()) / 3  # class-balanced: mean over the three label values
    assert head_loss(head, image, text, labels).item() == pytest.approx(expected, rel=1e-5)
    assert expected == pytest.approx(0.142297, rel=1e-4)


def test_ranking_loss_on_a_hand_computed_case() -> None:
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = image.clone()
    # logit_scale = log 1: logits are the cosines, identity matrix; each row's cross-entropy
    # is -log(e / (e + 1)) = log(1 + 1/e) = 0.3132617, the same in both directions
    loss = ranking_loss(image, text, torch.tensor(0.0))
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    # a second exact match in the batch is masked out instead of being pushed away
    labels = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    masked = ranking_loss(image, text, torch.tensor(0.0), labels)
    # logits[0, 1] becomes -inf: text 0 -> image row and image 1 -> text column each lose their
    # competitor (cross-entropy 0); the other two stay log(1 + 1/e), so each direction averages half
    assert masked.item() == pytest.approx(0.5 * math.log(1 + math.exp(-1)), rel=1e-6)
