"""Sound-texture statistics of a fixed-length window, in torch, shared by training and the service.

A window of general sound (rain, an engine, a dog) is described by how its log-mel energy is
distributed and how it moves, not by where in the window an event falls: per-band mean, spread
and frame-to-frame change; how coarse bands rise and fall together (their correlation); and how
fast each band's envelope fluctuates (its modulation spectrum, pooled into log-spaced bins). These
are the summary statistics auditory texture work uses, computed on our own log-mel frontend.

With ``pcen`` the same statistics are also taken of PCEN frames (app/features/pcen.py) and
appended: log compression keeps a sound's level and steady background, PCEN divides both out and
leaves its onsets and fluctuations, and retrieval of unseen sound classes uses the two together
(reports/audio).

The output is one statistics vector per window, shaped (B, 1, n_stats) so it fits the frontend
convention of (batch, frames, features) with a single "frame". The modulation bins depend on
the number of frames, so every window must have the same length (the encoder centres or pads
each input to its window first).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from app.features.filterbank import power_spectrum
from app.features.logmel import LogMel
from app.features.pcen import Pcen


@lru_cache(maxsize=64)  # a service sees one or two window lengths; computing them per call cost a query ~0.1 ms
def modulation_edges(n_frames: int, n_bins: int) -> tuple[tuple[int, int], ...]:
    """[start, stop) rfft-bin ranges, log-spaced from the first non-DC bin to the last.

    Duplicates from rounding are dropped, so short windows get fewer (never empty) bins.
    """
    n_freqs = n_frames // 2 + 1
    stops = np.unique(np.round(np.geomspace(1, n_freqs, n_bins)).astype(int))
    starts = np.r_[1, stops[:-1]]
    return tuple((int(a), int(b)) for a, b in zip(starts, stops) if b > a)  # immutable: the result is cached


class TextureStats(torch.nn.Module):
    """Waveform batch (B, samples) -> texture statistics (B, 1, n_stats).

    Args:
        n_mels: log-mel bands (per-band mean, std and mean absolute delta: 3 x n_mels values).
        bands: coarse bands the mel bands are averaged into for correlation and modulation;
            must divide ``n_mels``.
        mod_bins: log-spaced modulation-frequency bins per coarse band.
        pcen: also append the statistics of PCEN frames (librosa's default PCEN), doubling the output.
    """

    def __init__(self, sample_rate: int = 16000, n_mels: int = 64, bands: int = 16, mod_bins: int = 8,
                 win_ms: float = 25.0, hop_ms: float = 10.0, pcen: bool = False) -> None:
        super().__init__()
        if bands < 2 or n_mels % bands:
            raise ValueError(f"bands ({bands}) must be at least 2 and divide n_mels ({n_mels})")
        if mod_bins < 2:
            raise ValueError(f"mod_bins must be at least 2, got {mod_bins}")
        self.sample_rate = sample_rate
        self.n_mels, self.bands, self.mod_bins = n_mels, bands, mod_bins
        self.logmel = LogMel(sample_rate, win_ms=win_ms, hop_ms=hop_ms, n_mels=n_mels)
        self.pcen = Pcen(frames_per_s=1000.0 / hop_ms) if pcen else None
        rows, cols = np.triu_indices(bands, 1)
        self.register_buffer("upper_rows", torch.from_numpy(rows), persistent=False)
        self.register_buffer("upper_cols", torch.from_numpy(cols), persistent=False)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return self.from_log_mel(self.logmel(wave))

    def from_log_mel(self, mel: torch.Tensor) -> torch.Tensor:
        """The statistics of ``self.logmel(wave)`` (B, T, M), computed elsewhere (a shared STFT)."""
        if mel.shape[1] < 3:
            raise ValueError(f"texture statistics need at least 3 frames, got {mel.shape[1]}; use a longer window")
        parts = [self.statistics(mel)]
        if self.pcen is not None:
            parts.append(self.statistics(self.pcen(mel)))
        return torch.cat(parts, 1)[:, None, :]

    def statistics(self, mel: torch.Tensor) -> torch.Tensor:
        """(B, n) statistics of (B, T, M) frames: per-band moments, correlations, modulation."""
        n, frames, _ = mel.shape
        delta = mel[:, 1:] - mel[:, :-1]
        per_band = [mel.mean(1), mel.std(1, correction=0), delta.abs().mean(1)]

        coarse = mel.reshape(n, frames, self.bands, -1).mean(3)  # (B, T, bands)
        centred = coarse - coarse.mean(1, keepdim=True)
        # 1e-3 keeps a flat (silent) band from dividing by zero; its correlations are then ~0
        z = centred / (centred.std(1, correction=0, keepdim=True) + 1e-3)
        corr = (z.transpose(1, 2) @ z) / frames
        correlation = corr[:, self.upper_rows, self.upper_cols]

        taper = _taper(frames, mel.dtype, mel.device)
        power = power_spectrum(torch.fft.rfft(centred * taper, dim=1))  # (B, F, bands)
        binned = torch.stack([power[:, a:b].sum(1) for a, b in modulation_edges(frames, self.mod_bins)], 1)
        modulation = torch.log(binned + 1e-3).flatten(1)  # bin-major: all bands of bin 0, then bin 1...

        return torch.cat([*per_band, correlation, modulation], 1)


@lru_cache(maxsize=16)
def _taper(frames: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(1, frames, 1) symmetric Hann taper for the modulation spectrum, made once per length."""
    return torch.hann_window(frames, periodic=False, dtype=dtype, device=device)[None, :, None]
