"""Per-window channel equalisation of speech_embedding's log-mel input (issue 37, round 7).

A fixed channel (microphone, room) or a speaker's average vocal-tract colouring is, to first order, an
additive offset on the log-mel spectrum that stays constant over time. Subtracting a window's own mean
log-mel spectrum removes it (cepstral mean normalisation, on the mel bands); the frozen front-end was
trained on inputs in its own range, so a fixed global mean spectrum ``g`` is added back:

    x'[t] = x[t] - alpha * m_w + alpha * g                       (mean only)
    x'[t] = g + (x[t] - m_w) * s_g / s_w                          (``variance``: CMVN, alpha ignored)

``m_w`` and ``s_w`` are the window's per-band mean and standard deviation over its selected frames:
every frame (``frames="all"``) or the speech frames only (``"speech"``: frames whose level, the mean
over the bands, is at most ``speech_range`` below the window's loudest frame, so padding and pauses do
not count). The shift applies to every frame. ``g`` and ``s_g`` are the means of ``m_w`` and ``s_w`` over
training-side windows (:func:`fit_global`), stored in the checkpoint's config so a run is reproducible.
Units are the graph's ``mel / 10 + 2`` (1.0 is 10 dB). reports/audio/channel_norm.md has the trial.
"""

from __future__ import annotations

from typing import Any

import torch

BANDS = 32
FRAMES = ("all", "speech")
SPEECH_RANGE = 3.0  # 30 dB under the window's loudest frame
STD_FLOOR = 0.05  # 0.5 dB: a band flat over the window is not stretched without bound


def selected_frames(mel: torch.Tensor, frames: str, speech_range: float = SPEECH_RANGE) -> torch.Tensor:
    """(B, T, bands) -> (B, T) float weights, 1 for a frame that counts in the window's statistics."""
    if frames == "all":
        return torch.ones(mel.shape[:2], dtype=mel.dtype, device=mel.device)
    if frames != "speech":
        raise ValueError(f"channel equalisation frames must be one of {FRAMES}, got {frames!r}")
    level = mel.mean(dim=2)
    return (level >= level.amax(dim=1, keepdim=True) - speech_range).to(mel.dtype)


def window_stats(mel: torch.Tensor, frames: str, speech_range: float = SPEECH_RANGE) -> tuple[torch.Tensor, torch.Tensor]:
    """Each window's per-band mean and standard deviation over its selected frames: two (B, bands)."""
    weight = selected_frames(mel, frames, speech_range).unsqueeze(2)  # (B, T, 1); the loudest frame always counts
    count = weight.sum(dim=1)
    mean = (mel * weight).sum(dim=1) / count
    var = ((mel - mean.unsqueeze(1)).square() * weight).sum(dim=1) / count
    return mean, var.sqrt().clamp_min(STD_FLOOR)


def fit_global(mels: list[torch.Tensor], frames: str, speech_range: float = SPEECH_RANGE) -> dict[str, list[float]]:
    """``g`` and ``s_g``: the mean over windows (batches of (B, T, bands)) of each window's statistics."""
    means, stds = zip(*(window_stats(m, frames, speech_range) for m in mels))
    return {"mean": torch.cat(means).mean(dim=0).tolist(), "std": torch.cat(stds).mean(dim=0).tolist()}


class ChannelEqualiser(torch.nn.Module):
    """(B, T, bands) log-mel -> the same, equalised per window (see the module docstring)."""

    def __init__(self, mean: list[float], std: list[float] | None = None, alpha: float = 1.0, frames: str = "speech",
                 variance: bool = False, speech_range: float = SPEECH_RANGE) -> None:
        super().__init__()
        if frames not in FRAMES:
            raise ValueError(f"channel equalisation frames must be one of {FRAMES}, got {frames!r}")
        if len(mean) != BANDS or (std is not None and len(std) != BANDS):
            raise ValueError(f"channel equalisation needs {BANDS} band means (and stds)")
        if variance and std is None:
            raise ValueError("channel equalisation with variance needs the global band stds")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"channel equalisation alpha must be in [0, 1], got {alpha}")
        self.alpha, self.frames, self.variance, self.speech_range = float(alpha), frames, bool(variance), float(speech_range)
        self.register_buffer("g", torch.tensor(mean, dtype=torch.float32))
        self.register_buffer("s_g", torch.tensor(std if std is not None else [1.0] * BANDS, dtype=torch.float32))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        m_w, s_w = window_stats(mel, self.frames, self.speech_range)
        if self.variance:
            return self.g + (mel - m_w.unsqueeze(1)) * (self.s_g / s_w).unsqueeze(1)
        return mel + self.alpha * (self.g - m_w).unsqueeze(1)

    def spec(self) -> dict[str, Any]:
        """The checkpoint config entry that rebuilds this module (``ChannelEqualiser(**spec)``)."""
        return {"mean": [round(v, 6) for v in self.g.tolist()], "std": [round(v, 6) for v in self.s_g.tolist()],
                "alpha": self.alpha, "frames": self.frames, "variance": self.variance, "speech_range": self.speech_range}
