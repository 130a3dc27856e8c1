"""Training objectives of papers 000 (contrastive) and 004 (penalisation, triplet, quantisation).

Each function returns the batch mean of the per-example quantity the paper defines, so a loss
value does not depend on the batch size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def contrastive_loss(x1: torch.Tensor, x2: torch.Tensor, same: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """Paper 000 eq. (2): ``Y/2 D^2 + (1-Y)/2 max(0, m - D)^2`` with ``D = ||x1 - x2||``.

    Args:
        x1, x2: (B, dim) embeddings of the two sides of each pair.
        same: (B,) 1 for a same-class pair (Y = 1), 0 otherwise.
        margin: m; different-class pairs further apart than m cost nothing.
    """
    # a small epsilon keeps the gradient of sqrt finite when a positive pair coincides
    distance = torch.sqrt(((x1 - x2) ** 2).sum(dim=1) + 1e-12)
    same = same.to(distance.dtype)
    return (same * 0.5 * distance**2 + (1 - same) * 0.5 * F.relu(margin - distance) ** 2).mean()


def penalisation(attention: torch.Tensor) -> torch.Tensor:
    """Paper 004 eq. (6): ``||A A^T - I||_F^2`` per example (A is heads x time), batch mean.

    The paper writes the Frobenius norm with a square (the self-attentive sentence embedding
    paper it follows squares it too); it pushes heads to attend to different frames.
    """
    gram = attention @ attention.transpose(1, 2)
    eye = torch.eye(attention.shape[1], device=attention.device, dtype=attention.dtype)
    return ((gram - eye) ** 2).sum(dim=(1, 2)).mean()


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Row-wise ``1 - cos(a, b)``."""
    return 1.0 - F.cosine_similarity(a, b, dim=1, eps=1e-8)


def triplet_loss(anchor: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor, margin: float = 0.5) -> torch.Tensor:
    """Paper 004 eq. (7): ``max(0, theta + Dc(p, a) - Dc(n, a))`` with cosine distance, batch mean."""
    return F.relu(margin + cosine_distance(positive, anchor) - cosine_distance(negative, anchor)).mean()


def quantisation(*hash_values: torch.Tensor) -> torch.Tensor:
    """Paper 004 eq. (8): ``sum over x in (a, p, n) of || |f(x)| - 1 ||_1``, batch mean."""
    return sum((v.abs() - 1).abs().sum(dim=1) for v in hash_values).mean()  # type: ignore[union-attr]


@dataclass(frozen=True)
class HashLossWeights:
    """Paper 004's coefficients: alpha (P), beta (T), gamma (Q) = 0.01, 1, 0.01."""

    alpha: float = 0.01
    beta: float = 1.0
    gamma: float = 0.01
    margin: float = 0.5  # theta; the paper does not state its value


def hashing_objective(
    values: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    attentions: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    weights: HashLossWeights = HashLossWeights(),
) -> dict[str, torch.Tensor]:
    """Paper 004 eq. (9): ``O = alpha P + beta T + gamma Q`` for (anchor, positive, negative).

    P is averaged over the three examples of each triplet. Returns every term and ``total``.
    """
    anchor, positive, negative = values
    p = sum(penalisation(a) for a in attentions) / 3.0
    t = triplet_loss(anchor, positive, negative, weights.margin)
    q = quantisation(anchor, positive, negative)
    total = weights.alpha * p + weights.beta * t + weights.gamma * q
    return {"total": total, "penalisation": p, "triplet": t, "quantisation": q}  # type: ignore[dict-item]
