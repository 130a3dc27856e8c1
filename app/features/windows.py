"""Sliding windows over long audio: every window becomes one indexed segment."""

from __future__ import annotations

import numpy as np


def window_bounds(num_samples: int, sample_rate: int, window_s: float, hop_s: float) -> list[tuple[int, int]]:
    """Sample ranges ``[start, end)`` of windows of ``window_s`` every ``hop_s`` seconds.

    Audio no longer than one window is one segment (the encoder zero-pads it). Otherwise windows
    start every hop, and a last window is aligned to the end so the tail is never dropped.
    """
    if window_s <= 0 or hop_s <= 0:
        raise ValueError("window and hop must be positive")
    win = max(1, int(round(window_s * sample_rate)))
    hop = max(1, int(round(hop_s * sample_rate)))
    if num_samples <= win:
        return [(0, num_samples)]
    starts = list(range(0, num_samples - win + 1, hop))
    if starts[-1] + win < num_samples:
        starts.append(num_samples - win)
    return [(s, s + win) for s in starts]


def cut_windows(wave: np.ndarray, sample_rate: int, window_s: float, hop_s: float) -> tuple[list[np.ndarray], np.ndarray]:
    """The windows of ``wave`` and their (start, end) times in seconds, shape (n, 2)."""
    bounds = window_bounds(len(wave), sample_rate, window_s, hop_s)
    times = np.asarray(bounds, dtype=np.float64) / sample_rate
    return [wave[s:e] for s, e in bounds], times
