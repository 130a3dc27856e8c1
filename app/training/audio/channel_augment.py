"""Channel augmentation: a random microphone/room colouring of a training window (pure numpy).

Why: on English digits by unseen speakers the default ranks a query's own speaker's clips far above
another speaker's (AP 0.85 against 0.57). Two real training speakers, each recorded with one
microphone in one room, teach the network that a word comes with one fixed spectral colouring; speed
perturbation varies the voice but not the channel. A random smooth equaliser and a little synthetic
reverberation vary the channel instead, so the same word through another microphone and room stays
the same word.

Both are off unless asked for (``AugmentConfig.eq_prob`` / ``reverb_prob``), and draw nothing from
the random generator when off, so a recipe without them trains exactly as before.
"""

from __future__ import annotations

import numpy as np

EQ_POINTS = 6  # control points of the gain curve: about one per octave from 100 Hz to 4 kHz (8 kHz audio)
EQ_LOW_HZ = 100.0


def eq_curve(n_samples: int, sample_rate: int, gains_db: np.ndarray) -> np.ndarray:
    """Linear gains for the rfft bins of ``n_samples`` samples: ``gains_db`` at control frequencies
    spaced evenly in log-frequency from EQ_LOW_HZ to Nyquist, linearly interpolated (in dB) between
    them and held flat beyond the ends, so the curve is smooth like a microphone's response, not a comb."""
    freqs = np.fft.rfftfreq(n_samples, 1.0 / sample_rate)
    controls = np.geomspace(EQ_LOW_HZ, sample_rate / 2, len(gains_db))
    db = np.interp(np.log(np.maximum(freqs, 1e-3)), np.log(controls), gains_db)
    return 10.0 ** (db / 20.0)


def random_eq(wave: np.ndarray, sample_rate: int, rng: np.random.Generator, max_db: float) -> np.ndarray:
    """``wave`` through a random smooth equaliser, each control point's gain uniform in +-``max_db``.
    The result's RMS is that of the input: level is the gain augmentation's job."""
    gains = rng.uniform(-max_db, max_db, EQ_POINTS)
    spectrum = np.fft.rfft(wave.astype(np.float64))
    return _at_level_of(wave, np.fft.irfft(spectrum * eq_curve(len(wave), sample_rate, gains), n=len(wave)))


def synthetic_room(sample_rate: int, rt60_s: float, rng: np.random.Generator) -> np.ndarray:
    """An impulse response: the direct path (1 at t=0) then exponentially decaying noise whose energy
    falls 60 dB in ``rt60_s``, at a direct-to-reverberant ratio drawn between 0 and 10 dB."""
    n = max(2, int(rt60_s * sample_rate))
    t = np.arange(1, n) / sample_rate
    tail = rng.standard_normal(n - 1) * 10.0 ** (-3.0 * t / rt60_s)  # amplitude: -60 dB of energy at rt60
    drr_db = rng.uniform(0.0, 10.0)
    tail *= np.sqrt(10.0 ** (-drr_db / 10.0) / max(float(np.sum(tail ** 2)), 1e-12))
    return np.concatenate([[1.0], tail])


def reverberate(wave: np.ndarray, sample_rate: int, rng: np.random.Generator,
                rt60_s: tuple[float, float]) -> np.ndarray:
    """``wave`` in a synthetic room (reverberation time uniform in ``rt60_s``), cut to its own length
    (the tail past the window is what the next window would hear) and brought back to its RMS."""
    room = synthetic_room(sample_rate, rng.uniform(*rt60_s), rng)
    n = len(wave) + len(room) - 1
    size = 1 << (n - 1).bit_length()
    return _at_level_of(wave, np.fft.irfft(np.fft.rfft(wave.astype(np.float64), size) * np.fft.rfft(room, size), size)[: len(wave)])


def _at_level_of(wave: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out`` scaled to ``wave``'s RMS, as float32: the channel colours, the gain augmentation sets the level."""
    before, after = np.sqrt(np.mean(wave.astype(np.float64) ** 2)), np.sqrt(np.mean(out ** 2))
    return (out * (before / after) if after > 0 else out).astype(np.float32)
