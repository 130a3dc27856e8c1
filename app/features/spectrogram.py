"""Log-frequency log-spectrogram of paper 000, in torch, shared by training and the service.

Paper 000 feeds its Siamese MLP with "log spectrogram features, taking 1024 point FFT over a
window size of 64 ms and an overlap of 32 ms", both axes on a log scale, 79 frequency bins, the
frames concatenated into one long vector. Here the frequency axis is pooled into ``n_bands``
triangular bands whose centres are spaced evenly in log-frequency; the time axis keeps one column
per 32-ms hop (the paper's 171 "time quantisation bins" do not fit 2-s clips at that hop, so we keep
the frames). ``build_features`` also builds the log-mel frontend from a config dict, so a
checkpoint's config alone decides which frontend the encoder uses.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch

from app.features.filterbank import FilterbankSpectrogram
from app.features.logmel import LogMel
from app.features.texture import TextureStats


@lru_cache(maxsize=16)
def log_frequency_filterbank(
    sample_rate: int, n_fft: int, n_bands: int, fmin: float = 50.0, fmax: float | None = None
) -> np.ndarray:
    """(n_bands, n_fft // 2 + 1) triangular filters on a log-frequency axis, each summing to 1.

    Band ``i`` rises from edge ``i`` to its centre ``i + 1`` and falls to edge ``i + 2``, with the
    ``n_bands + 2`` edges spaced geometrically from ``fmin`` to ``fmax``. At low frequencies a band
    can be narrower than the FFT bin spacing and catch no bin; such a band falls back to linear
    interpolation between the two bins around its centre, so no band is ever empty. Rows sum to 1
    so a band is the average power it covers, comparable between narrow and wide bands.
    """
    fmax = sample_rate / 2 if fmax is None else fmax
    if not 0 < fmin < fmax <= sample_rate / 2:
        raise ValueError(f"need 0 < fmin < fmax <= sample_rate/2, got fmin={fmin}, fmax={fmax}")
    freqs = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    log_edges = np.linspace(np.log(fmin), np.log(fmax), n_bands + 2)
    log_f = np.log(np.maximum(freqs, 1e-9))
    bank = np.zeros((n_bands, freqs.size), dtype=np.float64)
    spacing = freqs[1]
    for i in range(n_bands):
        lo, centre, hi = log_edges[i], log_edges[i + 1], log_edges[i + 2]
        rising = (log_f - lo) / (centre - lo)
        falling = (hi - log_f) / (hi - centre)
        row = np.maximum(0.0, np.minimum(rising, falling))
        row[0] = 0.0  # DC has no place on a log axis
        if row.sum() <= 0:
            position = np.exp(centre) / spacing
            left = int(np.floor(position))
            frac = position - left
            row[left] += 1.0 - frac
            if left + 1 < freqs.size:
                row[left + 1] += frac
        bank[i] = row / row.sum()
    return bank.astype(np.float32)


def band_centres(sample_rate: int, n_bands: int, fmin: float = 50.0, fmax: float | None = None) -> np.ndarray:
    """Centre frequency in Hz of each band of :func:`log_frequency_filterbank`."""
    fmax = sample_rate / 2 if fmax is None else fmax
    return np.exp(np.linspace(np.log(fmin), np.log(fmax), n_bands + 2))[1:-1]


class LogSpectrogram(FilterbankSpectrogram):
    """Waveform batch (B, T) -> log band power (B, frames, n_bands), paper 000 parameters.

    Periodic Hann window of ``win_ms``, hop ``hop_ms``, ``n_fft``-point FFT, no centring:
    ``1 + (T - win) // hop`` frames; inputs shorter than one window are zero-padded to one window.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_fft: int = 1024,
        win_ms: float = 64.0,
        hop_ms: float = 32.0,
        n_bands: int = 79,
        fmin: float = 50.0,
        eps: float = 1e-8,
    ) -> None:
        win = int(round(sample_rate * win_ms / 1000))
        hop = int(round(sample_rate * hop_ms / 1000))
        super().__init__(sample_rate, win, hop, n_fft, log_frequency_filterbank(sample_rate, n_fft, n_bands, fmin), eps)
        self.n_bands = n_bands


def build_features(spec: dict[str, Any]) -> torch.nn.Module:
    """The feature frontend described by a checkpoint's ``features`` dict.

    ``{"kind": "logspec", ...LogSpectrogram kwargs}``, ``{"kind": "logmel", ...LogMel kwargs}``,
    ``{"kind": "texture", ...TextureStats kwargs}`` or ``{"kind": "speech-embedding", "pad_s": s}``
    (Google's pretrained speech_embedding frames, app/features/pretrained).

    Raises:
        ValueError: unknown kind or arguments the frontend does not take.
    """
    kwargs = dict(spec)
    kind = kwargs.pop("kind", None)
    from app.features.pretrained.speech_embedding import SpeechEmbeddingFeatures

    frontends: dict[str, type[torch.nn.Module]] = {"logspec": LogSpectrogram, "logmel": LogMel, "texture": TextureStats,
                                                   "speech-embedding": SpeechEmbeddingFeatures}
    if kind not in frontends:
        raise ValueError(f"unknown feature kind {kind!r}; known: {sorted(frontends)}")
    try:
        return frontends[kind](**kwargs)
    except TypeError as exc:
        raise ValueError(f"feature config {spec} does not fit {frontends[kind].__name__}: {exc}") from exc
