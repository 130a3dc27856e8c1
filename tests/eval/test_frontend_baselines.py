"""The frozen front-end rows of the generalisation bench: centred by the set's mean, codes are its signs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.eval.frontend_baselines import FRONTENDS
from app.usecases.demo_data import read_mono

DEMO = Path(__file__).resolve().parents[2] / "app" / "assets" / "demo"


@pytest.mark.parametrize("name", sorted(FRONTENDS))
def test_rows_are_centred_codes_are_signs_and_same_audio_ranks_first(name: str) -> None:
    words = [read_mono(p)[:16000] for p in sorted((DEMO / "words").glob("asc-five-*.flac"))[:3]]
    sounds = [read_mono(p)[:16000] for p in sorted((DEMO / "sounds").glob("*.ogg"))[:3]]
    windows = words + sounds + [words[0].copy()]
    floats, signs = FRONTENDS[name](windows)
    assert floats.shape[0] == signs.shape[0] == len(windows)
    assert np.allclose(floats.mean(axis=0), 0.0, atol=1e-4)  # the collection mean is removed
    assert np.array_equal(signs, np.where(floats > 0, 1.0, -1.0))
    unit = floats / np.linalg.norm(floats, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    assert int(np.argmax(sims[0])) == len(windows) - 1  # the identical window is the nearest
