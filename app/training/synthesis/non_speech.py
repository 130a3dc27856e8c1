"""Generated non-speech of many kinds, for the speech/non-speech router's negatives.

Why: the router (app/training/general_audio/router_fit.py) learns "not speech" from the everyday sounds it is
shown. With the ESC-50 clips left out (the leave-one-corpus-out run) its only negatives were 20
windows of silence, noise and tones, and it sent 36% of ESC-50 windows to the speech half; a user's
collection holds sounds of classes no corpus here has. These kinds cover textures real sounds are
made of (coloured and band-limited noise, bursts, impacts, sweeps, harmonic tones with vibrato,
click trains, crackle, tones in noise), so "not speech" is learned from structure, not from one
corpus's classes. Each window is a pure function of (seed, index): reproducible and order-free.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Maker = Callable[[np.random.Generator, int, int], np.ndarray]


def _coloured(rng: np.random.Generator, n: int, slope: float) -> np.ndarray:
    """Noise whose power falls as 1/f**slope (0 white, 1 pink, 2 brown)."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    spectrum /= np.maximum(np.arange(len(spectrum)), 1) ** (slope / 2)
    return np.fft.irfft(spectrum, n)


def _band(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """White noise kept between two random frequencies (a hiss, a hum of wind, an engine band)."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n, 1 / rate)
    low = rng.uniform(50, rate / 4)
    high = min(rate / 2, low * rng.uniform(1.3, 4.0))
    spectrum[(freqs < low) | (freqs > high)] = 0
    return np.fft.irfft(spectrum, n)


def brown_noise(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    return _coloured(rng, n, 2.0)


def band_noise(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    return _band(rng, n, rate)


def noise_bursts(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """Noise switched on and off at random: footsteps, knocks, a door."""
    envelope = np.zeros(n)
    for _ in range(int(rng.integers(1, 6))):
        start, length = int(rng.integers(0, n)), int(rng.uniform(0.02, 0.2) * rate)
        envelope[start: start + length] = rng.uniform(0.3, 1.0)
    return _coloured(rng, n, rng.uniform(0, 2)) * envelope


def impacts(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """Decaying resonances struck at random times: glass, wood, metal."""
    t = np.arange(n) / rate
    wave = np.zeros(n)
    for _ in range(int(rng.integers(1, 4))):
        start = int(rng.integers(0, n * 3 // 4))
        tail = t[: n - start]
        ring = sum(np.sin(2 * np.pi * rng.uniform(200, 5000) * tail + rng.uniform(0, 6.3)) for _ in range(3))
        wave[start:] += ring * np.exp(-tail / rng.uniform(0.01, 0.3))
    return wave


def siren(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """A tone whose pitch sweeps up and down: sirens, alarms, some birdsong."""
    t = np.arange(n) / rate
    centre, depth = rng.uniform(300, 2500), rng.uniform(0.1, 0.5)
    freq = centre * (1 + depth * np.sin(2 * np.pi * rng.uniform(0.3, 6.0) * t))
    return np.sin(2 * np.pi * np.cumsum(freq) / rate)


def harmonic_vibrato(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """A harmonic tone with vibrato (instruments, engines idling, animal calls): voiced but not speech."""
    t = np.arange(n) / rate
    f0 = rng.uniform(60, 800) * (1 + 0.02 * np.sin(2 * np.pi * rng.uniform(4, 7) * t))
    phase = 2 * np.pi * np.cumsum(f0) / rate
    harmonics = int(rng.integers(2, 10))
    decay = rng.uniform(0.5, 1.5)
    return sum(np.sin(h * phase) / h ** decay for h in range(1, harmonics + 1) if h * f0.max() < rate / 2)


def click_train(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """Regular clicks: clocks, typing, engines' ticks, insects."""
    wave = np.zeros(n)
    period = int(rate / rng.uniform(2, 60))
    jitter = rng.uniform(0, 0.3)
    position = int(rng.integers(0, period))
    while position < n:
        wave[position] = rng.uniform(0.5, 1.0) * rng.choice([-1, 1])
        position += max(1, int(period * (1 + jitter * rng.uniform(-1, 1))))
    kernel = np.exp(-np.arange(int(0.003 * rate)) / (0.0005 * rate)) * rng.standard_normal(int(0.003 * rate))
    return np.convolve(wave, kernel)[:n]


def crackle(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """Many random tiny clicks over soft noise: rain, fire, frying."""
    drops = (rng.random(n) < rng.uniform(0.0005, 0.02)) * rng.standard_normal(n)
    return drops + rng.uniform(0.0, 0.2) * _band(rng, n, rate)


def tone_in_noise(rng: np.random.Generator, n: int, rate: int) -> np.ndarray:
    """A steady tone at a random level inside noise: machines, fans, fridges."""
    t = np.arange(n) / rate
    tone = np.sin(2 * np.pi * rng.uniform(50, 3000) * t)
    return tone + rng.uniform(0.1, 2.0) * _coloured(rng, n, rng.uniform(0, 2)) / 0.3


VARIED_KINDS: tuple[Maker, ...] = (brown_noise, band_noise, noise_bursts, impacts, siren, harmonic_vibrato,
                                   click_train, crackle, tone_in_noise)


def varied_non_speech(n: int, window: int, sample_rate: int, seed: int) -> list[np.ndarray]:
    """``n`` windows cycling through :data:`VARIED_KINDS`, each peak-normalised to a random level
    from -40 to -3 dBFS (quiet and loud sounds alike are not speech)."""
    out = []
    for i in range(n):
        rng = np.random.default_rng([seed, i])
        wave = VARIED_KINDS[i % len(VARIED_KINDS)](rng, window, sample_rate)
        peak = float(np.abs(wave).max())
        level = 10 ** (rng.uniform(-40, -3) / 20)
        out.append((wave * (level / peak if peak > 0 else 0.0)).astype(np.float32))
    return out
