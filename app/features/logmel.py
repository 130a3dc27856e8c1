"""Log-mel spectrogram in torch (no torchaudio), shared by training and the service.

The filterbank follows the HTK mel scale with triangular filters on the FFT bin frequencies;
tests/features compares it with a plain numpy implementation.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from app.features.filterbank import FilterbankSpectrogram


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


@lru_cache(maxsize=16)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, fmin: float = 0.0, fmax: float | None = None) -> np.ndarray:
    """(n_mels, n_fft // 2 + 1) triangular filters, peak 1, HTK mel scale."""
    fmax = sample_rate / 2 if fmax is None else fmax
    bins = np.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / np.maximum(centre - lower, 1e-9)
    falling = (upper - bins[None, :]) / np.maximum(upper - centre, 1e-9)
    return np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)


class LogMel(FilterbankSpectrogram):
    """Waveform batch (B, T) -> log-mel frames (B, frames, n_mels).

    ``log(mel_power + eps)`` with a periodic Hann window; see :class:`FilterbankSpectrogram`
    for framing and padding.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        win_ms: float = 25.0,
        hop_ms: float = 10.0,
        n_mels: int = 40,
        n_fft: int | None = None,
        eps: float = 1e-6,
    ) -> None:
        win = int(round(sample_rate * win_ms / 1000))
        hop = int(round(sample_rate * hop_ms / 1000))
        n_fft = n_fft or 2 ** math.ceil(math.log2(win))
        super().__init__(sample_rate, win, hop, n_fft, mel_filterbank(sample_rate, n_fft, n_mels), eps)
        self.n_mels = n_mels
