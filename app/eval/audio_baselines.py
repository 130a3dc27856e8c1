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

from app.encoders.audio_nets import fit_to_window
from app.features.logmel import LogMel

SAMPLE_RATE = 16000
N_MELS = 40
N_CEPS = 13
SEGMENTS = 10
VOICED_FLOOR_DB = 30.0


def dct_ii(n_in: int, n_out: int) -> np.ndarray:
    """(n_out, n_in) orthonormal DCT-II rows: cepstra = log-mel @ dct_ii(...).T (the k = 0 row scaled as scipy's 'ortho')."""
    k = np.arange(n_out)[:, None]
    n = np.arange(n_in)[None, :]
    basis = np.cos(np.pi * k * (2 * n + 1) / (2 * n_in)) * np.sqrt(2.0 / n_in)
    basis[0] /= np.sqrt(2.0)
    return basis.astype(np.float32)


def voiced_span(frames: np.ndarray, floor_db: float = VOICED_FLOOR_DB) -> np.ndarray:
    """The frames from the first to the last whose loudest natural-log mel band is within ``floor_db`` of the peak."""
    loudness = frames.max(axis=1)
    keep = np.flatnonzero(loudness > loudness.max() - floor_db / 10.0 * np.log(10.0))
    return frames[keep[0]: keep[-1] + 1] if len(keep) >= 2 else frames


def segment_means(frames: np.ndarray, segments: int) -> np.ndarray:
    """(segments, d): the mean of each of ``segments`` near-equal runs of frames (the last frame repeats if too few)."""
    parts = np.array_split(np.arange(len(frames)), segments)
    return np.stack([frames[p].mean(axis=0) if len(p) else frames[-1] for p in parts])


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
