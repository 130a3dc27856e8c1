"""Per-channel energy normalisation (PCEN) of mel power frames, in torch.

PCEN (Wang et al., 2017, "Trainable frontend for robust and far-field keyword spotting") divides
each band's power by a slow running average of itself before compressing it:

    M[t] = (1 - s) M[t-1] + s E[t]          (M[0] = E[0])
    PCEN[t] = (E[t] / (eps + M[t])^alpha + delta)^r - delta^r

so a steady background and the recording's overall level largely cancel, and onsets stand out.
Log compression keeps both; the texture encoder uses the two side by side. The defaults are
librosa's (time constant 0.4 s, alpha 0.98, delta 2, r 0.5, eps 1e-6).

The running average is a first-order IIR filter. Over a fixed number of frames it equals one
matrix product with a lower-triangular matrix of decaying weights, which is exact, batched and
far faster in torch than a Python loop over frames.
"""

from __future__ import annotations

import math

import torch


def smoothing_coefficient(time_constant_s: float, frames_per_s: float) -> float:
    """librosa's s for a time constant: the IIR pole that gives that many frames of memory."""
    t = time_constant_s * frames_per_s
    return (math.sqrt(1.0 + 4.0 * t * t) - 1.0) / (2.0 * t * t)


def smoothing_matrix(frames: int, s: float, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(frames, frames) L with (L @ E)[t] = M[t] of the recursion above, M[0] = E[0]."""
    t = torch.arange(frames, dtype=torch.float64)
    lag = t[:, None] - t[None, :]
    weights = torch.where(lag >= 0, s * (1.0 - s) ** lag.clamp_min(0), torch.zeros(()))
    weights[:, 0] = (1.0 - s) ** t  # the start value E[0] carries the weight of everything before it
    return weights.to(dtype)


class Pcen(torch.nn.Module):
    """Log-mel frames (B, T, M), natural log of power -> PCEN frames (B, T, M)."""

    def __init__(self, frames_per_s: float, time_constant_s: float = 0.4, alpha: float = 0.98, delta: float = 2.0,
                 r: float = 0.5, eps: float = 1e-6) -> None:
        super().__init__()
        if time_constant_s <= 0:
            raise ValueError(f"time_constant_s must be positive, got {time_constant_s}")
        self.s = smoothing_coefficient(time_constant_s, frames_per_s)
        self.alpha, self.delta, self.r, self.eps = alpha, delta, r, eps
        self._matrices: dict[tuple[int, torch.dtype, torch.device], torch.Tensor] = {}

    def _matrix(self, frames: int, like: torch.Tensor) -> torch.Tensor:
        key = (frames, like.dtype, like.device)
        if key not in self._matrices:  # one per window length: the service uses one or two
            self._matrices[key] = smoothing_matrix(frames, self.s, like.dtype).to(like.device)
        return self._matrices[key]

    def forward(self, log_mel: torch.Tensor) -> torch.Tensor:
        power = torch.exp(log_mel)
        smooth = self._matrix(power.shape[1], power) @ power
        return (power / (self.eps + smooth).pow(self.alpha) + self.delta).pow(self.r) - self.delta**self.r
