"""SpecAugment masking: masked cells take the fill value, the rest is untouched, draws are seeded."""

from __future__ import annotations

import numpy as np
import torch

from app.training.audio.spec_augment import MaskConfig, mask_features


def test_masked_cells_are_whole_bands_and_frames_set_to_the_fill() -> None:
    feats = torch.arange(2 * 30 * 8, dtype=torch.float32).reshape(2, 30, 8) + 1000.0
    fill = torch.arange(8, dtype=torch.float32)  # distinct per bin, never equal to a feature
    out = mask_features(feats, fill, np.random.default_rng(3), MaskConfig(1, 3, 1, 5))
    masked = out != feats
    assert masked.any()
    # every masked cell holds its bin's fill value
    bins = torch.arange(8).expand(2, 30, 8)
    assert torch.equal(out[masked], fill[bins[masked]])
    for b in range(2):
        m = masked[b]
        full_rows = m.all(dim=1)  # frames masked across every bin (time masks)
        full_cols = m.all(dim=0)  # bins masked across every frame (frequency masks)
        # a masked cell lies in a fully masked frame or a fully masked band: nothing partial
        assert torch.equal(m, full_rows[:, None] | full_cols[None, :])
        assert full_cols.sum() <= 3 and full_rows.sum() <= 5
        # masks are contiguous stretches
        for line in (full_rows, full_cols):
            idx = torch.nonzero(line).ravel()
            if len(idx):
                assert idx[-1] - idx[0] + 1 == len(idx)
    assert torch.equal(feats, torch.arange(2 * 30 * 8, dtype=torch.float32).reshape(2, 30, 8) + 1000.0)  # input untouched


def test_same_seed_same_masks_and_zero_width_masks_change_nothing() -> None:
    feats = torch.randn(4, 50, 40)
    fill = torch.zeros(40)
    a = mask_features(feats, fill, np.random.default_rng(7), MaskConfig())
    b = mask_features(feats, fill, np.random.default_rng(7), MaskConfig())
    assert torch.equal(a, b)
    none = mask_features(feats, fill, np.random.default_rng(7), MaskConfig(2, 0, 2, 0))
    assert torch.equal(none, feats)

