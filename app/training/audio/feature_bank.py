"""Front-end features of augmented training windows, computed once and drawn from at every step.

Why: a frozen pretrained front-end (app/features/pretrained) costs ~100x the head it feeds, and its
output for a given window never changes, so computing it at every training step would spend the run on
the same arithmetic. The augmentation still varies: each clip gets ``copies`` independent draws.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

BATCH = 64


def build_bank(features: torch.nn.Module, windows_of: Callable[[np.ndarray], torch.Tensor], clips: int,
               copies: int) -> torch.Tensor:
    """(clips, copies, frames, bins): ``features`` of ``copies`` augmented windows of every clip
    (``windows_of(rows)`` draws one augmented window per clip index)."""
    from tqdm import tqdm

    if any(p.requires_grad for p in features.parameters()):
        raise ValueError("a feature bank needs a frozen front-end; these features have trainable weights")
    out = []
    with torch.inference_mode():
        for start in tqdm(range(0, clips, BATCH), desc="feature bank", unit="batch", leave=False):
            rows = np.arange(start, min(start + BATCH, clips))
            out.append(torch.stack([features(windows_of(rows)) for _ in range(copies)], dim=1))
    return torch.cat(out)


def draw(bank: torch.Tensor, indices: np.ndarray, rng: np.random.Generator) -> torch.Tensor:
    """One stored copy, chosen at random, of each clip in ``indices``."""
    copy = torch.from_numpy(rng.integers(bank.shape[1], size=len(indices)))
    return bank[torch.from_numpy(indices), copy]
