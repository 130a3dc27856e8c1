"""Training-free audio embeddings that every trained audio encoder is compared with, in the same run.

- ``mfcc_levin``: Levin et al. (2013) style downsampled MFCCs: 13 cepstra of 40 log-mel bands,
  the window's voiced span kept (frames within 30 dB of its loudest one), mean-normalised, then
  averaged over 10 equal segments and concatenated (130 values). Of the variants tried (plain
  sampling, deltas, 20 segments) this one was the strongest on every evaluation set
  (reports/audio/generalisation.md), so targets measured against it are not measured against a
  weak baseline.
- ``logmel_mean_std``: per-band mean and standard deviation of 40 log-mel bands (80 values).

Both are standardised per dimension over the set being searched (the usual practice for such
features; it uses no labels) and compared by cosine. They give floats only: no code.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from app.encoders.audio.audio_nets import fit_to_window
# the per-window numerics live with the encoder that reuses them (general-audio's MFCC view)
from app.encoders.audio.levin_mfcc import (N_CEPS, N_MELS, SEGMENTS, VOICED_FLOOR_DB, dct_ii,  # noqa: F401 (re-exported)
                                     segment_means, voiced_span)
from app.features.logmel import LogMel

SAMPLE_RATE = 16000


def _standardise(x: np.ndarray) -> np.ndarray:
    return ((x - x.mean(axis=0)) / (x.std(axis=0) + 1e-6)).astype(np.float32)


class _LogMelWindows:
    def __init__(self, window_s: float) -> None:
        self.logmel = LogMel(SAMPLE_RATE, n_mels=N_MELS)
        self.window = int(round(window_s * SAMPLE_RATE))

    def __call__(self, wave: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            w = fit_to_window(torch.from_numpy(np.require(wave, np.float32, ["W"])), self.window)
            return self.logmel(w[None])[0].numpy()


def mfcc_levin(windows: Sequence[np.ndarray], window_s: float = 1.0) -> np.ndarray:
    """(n, 130) downsampled-MFCC embeddings of 16 kHz windows, standardised over the set."""
    frames_of, dct = _LogMelWindows(window_s), dct_ii(N_MELS, N_CEPS)
    out = []
    for wave in windows:
        cepstra = voiced_span(frames_of(wave)) @ dct.T
        out.append(segment_means(cepstra - cepstra.mean(axis=0), SEGMENTS).ravel())
    return _standardise(np.stack(out))


def logmel_mean_std(windows: Sequence[np.ndarray], window_s: float = 1.0) -> np.ndarray:
    """(n, 80) per-band log-mel mean and standard deviation of 16 kHz windows, standardised over the set."""
    frames_of = _LogMelWindows(window_s)
    return _standardise(np.stack([np.r_[f.mean(axis=0), f.std(axis=0)] for f in map(frames_of, windows)]))


BASELINES = {"mfcc-levin": mfcc_levin, "logmel-mean-std": logmel_mean_std}
