"""Levin et al. (2013) style downsampled MFCC of one window: the numerics shared by the training-free
baseline (app/eval/audio_baselines.py) and general-audio's MFCC view (app/encoders/audio/speech_views.py), so
the view is exactly the baseline before its per-set standardisation.

13 cepstra of 40 natural-log mel bands, the window's voiced span kept (frames within 30 dB of its loudest
one), mean-normalised, averaged over 10 near-equal segments and concatenated: 130 values.
"""

from __future__ import annotations

import math

import numpy as np
import torch

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


MFCC_DIM = N_CEPS * SEGMENTS  # 130
_DCT = dct_ii(N_MELS, N_CEPS)


def levin_mfcc_frames(frames: np.ndarray) -> np.ndarray:
    """(T, 40) natural-log mel frames of one window -> (130,) downsampled MFCC, exactly as the baseline
    computes it before its per-set standardisation (the same three functions)."""
    cepstra = voiced_span(frames) @ dct_ii(N_MELS, N_CEPS).T
    return segment_means(cepstra - cepstra.mean(axis=0), SEGMENTS).ravel()


def levin_mfcc_batch(frames: torch.Tensor) -> torch.Tensor:
    """(B, T, 40) -> (B, 130): ``levin_mfcc_frames`` of every window at once, in torch (float64 inside).

    What a query pays for matters: a Python loop over windows cost 0.46 ms each, and even vectorised
    numpy 0.6 ms per query with the GIL held. As torch operations whose only branches are on shapes,
    it runs inside the general-audio sounds step's trace (app/encoders/traced.py), without the GIL.
    Each window's voiced span and its ten near-equal segments (numpy.array_split's sizes) become index
    ranges into running sums.
    """
    b, t, _ = frames.shape
    rows = torch.arange(b, device=frames.device)
    cepstra = frames.double() @ torch.from_numpy(_DCT.T).to(frames.device, torch.float64)  # (B, T, 13)
    loudness = frames.amax(dim=2)
    keep = loudness > loudness.amax(dim=1, keepdim=True) - VOICED_FLOOR_DB / 10.0 * math.log(10.0)
    voiced = keep.sum(dim=1) >= 2  # else the whole window, as voiced_span does
    first = keep.to(torch.uint8).argmax(dim=1)  # argmax gives the first of equal maxima
    last = t - keep.flip(1).to(torch.uint8).argmax(dim=1)
    start = torch.where(voiced, first, torch.zeros_like(first))
    stop = torch.where(voiced, last, torch.full_like(last, t))
    length = stop - start
    sums = torch.cat([cepstra.new_zeros(b, 1, N_CEPS), torch.cumsum(cepstra, dim=1)], dim=1)  # sums[:, i] = frames < i
    span_mean = (sums[rows, stop] - sums[rows, start]) / length[:, None]
    segment = torch.arange(SEGMENTS, device=frames.device)
    sizes = torch.div(length, SEGMENTS, rounding_mode="floor")[:, None] + (segment[None] < (length % SEGMENTS)[:, None]).long()
    seg_start = start[:, None] + torch.cumsum(sizes, dim=1) - sizes
    seg_sum = sums[rows[:, None], seg_start + sizes] - sums[rows[:, None], seg_start]
    means = seg_sum / sizes.clamp_min(1)[..., None]
    # an empty segment (a span under 10 frames) repeats the span's last frame, as segment_means does
    means = torch.where(sizes[..., None] > 0, means, cepstra[rows, stop - 1][:, None, :])
    return (means - span_mean[:, None, :]).reshape(b, MFCC_DIM).float()


def downsampled_mfcc(waves: torch.Tensor, logmel: LogMel | None = None) -> torch.Tensor:
    """(B, samples) 16 kHz windows -> (B, 130) raw downsampled MFCCs."""
    logmel = logmel or LogMel(SAMPLE_RATE, n_mels=N_MELS)
    return levin_mfcc_batch(logmel(waves).float())
