"""Training a speech head *with* the frozen front-end's view in its loss (round 4 of issue 37).

Why: general-audio-broad keeps the frozen speech_embedding frames' centred mean beside a head that was
trained alone, so the two repeat much of the same information and the fixed 50/50 weighting costs the head
where it is strong (Arabic keywords; reports/audio/version7.md). Here the triplet loss and the negative
mining see the joined vector the service will search, ``[sqrt(1 - w) * normalise(head), sqrt(w) *
normalise(mean frame - training mean)]``, so the head is pushed only where the frozen part ranks wrongly:
it learns what the front-end lacks. The quantisation and attention penalties stay on the head alone.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def bank_mean(bank: torch.Tensor) -> torch.Tensor:
    """(bins,) mean frame of a feature bank (clips, copies, frames, bins): the training mean the view centres by."""
    return bank.double().mean(dim=(0, 1, 2)).float()


def joined(values: torch.Tensor, frames: torch.Tensor, mean: torch.Tensor, weight: float) -> torch.Tensor:
    """(B, bits + bins): the head's values and the frames' centred mean, each unit length, weighted by ``weight``."""
    view = frames.mean(dim=1) - mean.to(frames.device)
    return torch.cat([math.sqrt(1.0 - weight) * F.normalize(values, dim=1),
                      math.sqrt(weight) * F.normalize(view, dim=1)], dim=1)
