"""Waveform augmentation and training windows with temporal context (pure numpy).

Paper 004 trains on segments "padded with their temporal context to a fixed length" so that
training looks like the sliding windows the search runs over long recordings: a word sits at some
offset inside the window, with neighbouring speech around it. Our clips are isolated, so the
context is borrowed from other random clips; sometimes it is left as zeros instead, which is what a
short query looks like after zero-padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np



def add_noise(wave: np.ndarray, snr_db: float, rng: np.random.Generator) -> np.ndarray:
    """White Gaussian noise at ``snr_db`` relative to the signal's mean power (silence stays clean)."""
    power = float(np.mean(wave.astype(np.float64) ** 2))
    if power <= 0:
        return wave.copy()
    noise = rng.standard_normal(wave.shape) * np.sqrt(power / 10 ** (snr_db / 10))
    return (wave + noise).astype(np.float32)


def apply_gain(wave: np.ndarray, gain_db: float) -> np.ndarray:
    return (wave * 10 ** (gain_db / 20)).astype(np.float32)


def change_speed(wave: np.ndarray, factor: float) -> np.ndarray:
    """Play ``factor`` times faster (pitch moves with it, like sox ``speed``): linear interpolation."""
    if factor <= 0:
        raise ValueError("speed factor must be positive")
    n_out = max(1, int(round(len(wave) / factor)))
    positions = np.arange(n_out) * factor
    return np.interp(positions, np.arange(len(wave)), wave).astype(np.float32)


def energetic_crop(wave: np.ndarray, length: int, rng: np.random.Generator | None) -> np.ndarray:
    """A ``length``-sample crop of a longer clip, avoiding near-silent stretches.

    ESC-50 clips are often padded with digital silence; a random crop of silence would teach the
    model that silence is a class. Candidate crops every 1/8 window are kept if their energy is at
    least half the best one's; ``rng=None`` takes the most energetic (deterministic evaluation).
    """
    if len(wave) <= length:
        return wave
    step = max(1, length // 8)
    starts = np.arange(0, len(wave) - length + 1, step)
    csum = np.concatenate([[0.0], np.cumsum(wave.astype(np.float64) ** 2)])
    energy = csum[starts + length] - csum[starts]
    if rng is None:
        start = int(starts[int(np.argmax(energy))])
    else:
        good = starts[energy >= 0.5 * energy.max()]
        start = int(rng.choice(good))
    return wave[start : start + length]


def augmented_copy(wave: np.ndarray, rng: np.random.Generator, speed: tuple[float, float] = (0.9, 1.1),
                   noise_prob: float = 0.5, snr_db: tuple[float, float] = (10.0, 30.0),
                   gain_db: tuple[float, float] = (-6.0, 6.0)) -> np.ndarray:
    """A whole clip played at another speed, with noise half the time and another gain.

    For models fitted to window statistics (texture-mlp), which see every window of a clip
    rather than one training window at a time.
    """
    out = change_speed(np.asarray(wave, np.float32), rng.uniform(*speed))
    if rng.random() < noise_prob:
        out = add_noise(out, rng.uniform(*snr_db), rng)
    return apply_gain(out, rng.uniform(*gain_db))


@dataclass(frozen=True)
class AugmentConfig:
    """Probabilities and ranges; defaults are mild enough not to change a word's identity."""

    max_shift_s: float = 0.15
    context_prob: float = 0.5
    noise_prob: float = 0.3
    snr_db: tuple[float, float] = (10.0, 30.0)
    gain_db: tuple[float, float] = (-6.0, 6.0)
    speed_prob: float = 0.3
    speed: tuple[float, float] = (0.9, 1.1)


def training_window(
    wave: np.ndarray,
    length: int,
    sample_rate: int,
    rng: np.random.Generator,
    config: AugmentConfig,
    context: Callable[[], np.ndarray] | None = None,
) -> np.ndarray:
    """One augmented training window of ``length`` samples around ``wave``.

    Speed, then placement (a random crop of a longer clip, or a random offset up to
    ``max_shift_s`` beyond centring for a shorter one), context or zeros around it, gain, noise.

    Args:
        context: returns another random clip to borrow surrounding audio from; None for zeros.
    """
    if rng.random() < config.speed_prob:
        wave = change_speed(wave, rng.uniform(*config.speed))
    if len(wave) > length:
        wave = energetic_crop(wave, length, rng)
    shift = int(config.max_shift_s * sample_rate)
    low, high = min(0, length - len(wave)) - shift, max(0, length - len(wave)) + shift
    offset = int(rng.integers(low, high + 1))
    out = np.zeros(length, np.float32)
    if context is not None and rng.random() < config.context_prob:
        left, right = context(), context()
        # neighbour audio before and after the clip, as in a continuous recording
        if offset > 0:
            piece = left[-offset:]
            out[offset - len(piece) : offset] = piece
        tail = offset + len(wave)
        if tail < length:
            piece = right[: length - tail]
            out[tail : tail + len(piece)] = piece
    first, last = max(0, offset), min(length, offset + len(wave))
    out[first:last] = wave[first - offset : last - offset]
    out = apply_gain(out, rng.uniform(*config.gain_db))
    if rng.random() < config.noise_prob:
        out = add_noise(out, rng.uniform(*config.snr_db), rng)
    return out


def eval_window(wave: np.ndarray, length: int) -> np.ndarray:
    """The deterministic window evaluation uses: the most energetic crop, or the clip centred in zeros."""
    if len(wave) > length:
        return energetic_crop(wave, length, None).astype(np.float32)
    out = np.zeros(length, np.float32)
    left = (length - len(wave)) // 2
    out[left : left + len(wave)] = wave
    return out
