"""Generated non-speech for the router: each kind has the structure its name promises, levels are bounded,
and every window is a pure function of (seed, index)."""

from __future__ import annotations

import numpy as np
import pytest

from app.training.synthesis.non_speech import (
    VARIED_KINDS,
    band_noise,
    click_train,
    harmonic_vibrato,
    siren,
    varied_non_speech,
)

RATE, N = 16000, 16000


def _spectrum(wave: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.fft.rfftfreq(len(wave), 1 / RATE), np.abs(np.fft.rfft(wave)) ** 2


def test_windows_cycle_through_every_kind_at_bounded_levels() -> None:
    waves = varied_non_speech(2 * len(VARIED_KINDS), N, RATE, seed=5)
    assert len(waves) == 18 and all(w.shape == (N,) and w.dtype == np.float32 for w in waves)
    assert all(np.isfinite(w).all() for w in waves)
    peaks_db = [20 * np.log10(np.abs(w).max()) for w in waves]
    assert all(-40.01 <= p <= -2.99 for p in peaks_db)  # peak-normalised to -40 .. -3 dBFS
    # window i is made by kind i mod 9, so the same kind returns with new parameters
    assert not np.array_equal(waves[0], waves[len(VARIED_KINDS)])


def test_a_window_depends_only_on_seed_and_index() -> None:
    few, many = varied_non_speech(3, N, RATE, seed=1), varied_non_speech(12, N, RATE, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip(few, many))
    assert not np.array_equal(few[0], varied_non_speech(1, N, RATE, seed=2)[0])


def test_band_noise_stays_in_its_band() -> None:
    freqs, power = _spectrum(band_noise(np.random.default_rng(0), N, RATE))
    inside = freqs[power > 1e-9 * power.max()]
    assert inside.min() >= 50 and inside.max() <= RATE / 2
    assert inside.max() / inside.min() <= 4.01  # high = low x 1.3 .. 4


def test_siren_sweeps_its_pitch() -> None:
    wave = siren(np.random.default_rng(3), N, RATE)
    peaks = []
    for start in range(0, N - 2048, 2048):
        freqs, power = _spectrum(wave[start: start + 2048])
        peaks.append(freqs[power.argmax()])
    assert max(peaks) / min(peaks) > 1.1  # a steady tone would keep one peak


def test_harmonic_vibrato_has_harmonics_of_one_fundamental() -> None:
    rng = np.random.default_rng(4)
    wave = harmonic_vibrato(rng, N, RATE)
    f0 = np.random.default_rng(4).uniform(60, 800)  # the first draw of the same generator
    freqs, power = _spectrum(wave)
    near = lambda f: power[(freqs > 0.97 * f) & (freqs < 1.03 * f)].sum()  # noqa: E731
    between = power[(freqs > 1.3 * f0) & (freqs < 1.7 * f0)].sum()
    assert near(f0) > 10 * between and near(2 * f0) > 10 * between


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_click_trains_are_sparse(seed: int) -> None:
    wave = click_train(np.random.default_rng(seed), N, RATE)
    loud = np.abs(wave) > 0.1 * np.abs(wave).max()
    assert 0 < loud.mean() < 0.2  # short clicks, mostly silence between them
