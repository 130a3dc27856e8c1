"""Channel augmentation: the equaliser's curve and gains by hand, the room's decay and mix, and the
training window with it on or off."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from app.training.audio.augment import CHANNEL_AUGMENT, AugmentConfig, training_window
from app.training.audio.channel_augment import EQ_LOW_HZ, EQ_POINTS, eq_curve, random_eq, reverberate, synthetic_room

RATE = 8000


def test_the_curve_passes_through_its_control_points_and_interpolates_in_log_frequency() -> None:
    gains = np.array([6.0, -6.0, 0.0, 3.0, -3.0, 1.0])
    n_bins = RATE // 2 + 1  # one second of samples: bins 1 Hz apart
    curve = 20 * np.log10(eq_curve(RATE, RATE, gains))
    controls = EQ_LOW_HZ * (RATE / 2 / EQ_LOW_HZ) ** (np.arange(EQ_POINTS) / (EQ_POINTS - 1))
    assert curve[100] == pytest.approx(6.0) and curve[4000] == pytest.approx(1.0)  # the two ends
    assert curve[0] == pytest.approx(6.0) and curve[50] == pytest.approx(6.0)  # held flat below 100 Hz
    # halfway between the first two controls in log-frequency, halfway between their gains in dB
    middle = np.sqrt(controls[0] * controls[1])
    assert np.interp(middle, np.arange(n_bins), curve) == pytest.approx(0.0, abs=0.05)
    assert np.allclose(eq_curve(RATE, RATE, np.zeros(EQ_POINTS)), 1.0) and len(curve) == n_bins
    assert len(eq_curve(RATE + 1, RATE, gains)) == n_bins  # an odd length: its bins, not Nyquist's


def test_the_equaliser_scales_each_frequency_by_its_gain_and_keeps_the_level() -> None:
    t = np.arange(RATE) / RATE  # one second: 1 Hz bins, so these tones sit on bins (no leakage)
    wave = (0.3 * np.sin(2 * np.pi * 300 * t) + 0.3 * np.sin(2 * np.pi * 1500 * t)).astype(np.float32)
    out = random_eq(wave, RATE, np.random.default_rng(7), max_db=6.0)
    gains = np.random.default_rng(7).uniform(-6.0, 6.0, EQ_POINTS)  # the same draw, by hand
    curve = eq_curve(RATE, RATE, gains)
    spectrum = np.abs(np.fft.rfft(out.astype(np.float64)))
    assert spectrum[300] / spectrum[1500] == pytest.approx(curve[300] / curve[1500], rel=1e-4)
    assert np.sqrt(np.mean(out.astype(np.float64) ** 2)) == pytest.approx(np.sqrt(np.mean(wave.astype(np.float64) ** 2)), rel=1e-5)
    assert out.dtype == np.float32 and out.shape == wave.shape


def test_a_room_is_a_direct_path_then_a_tail_that_decays_60_db_in_rt60() -> None:
    rt60 = 0.4
    room = synthetic_room(RATE, rt60, np.random.default_rng(3))
    assert room[0] == 1.0 and len(room) == int(rt60 * RATE)
    tail_energy = float(np.sum(room[1:] ** 2))
    assert 0.1 - 1e-9 <= tail_energy <= 1.0 + 1e-9  # direct-to-reverberant ratio 0-10 dB
    tenth = len(room) // 10
    first, last = np.sum(room[1 : 1 + tenth] ** 2), np.sum(room[-tenth:] ** 2)
    assert 10 * np.log10(first / last) == pytest.approx(0.8 * 60, abs=6)  # 8 tenths of rt60 apart


def test_reverberating_an_impulse_gives_the_room_at_the_waves_level() -> None:
    wave = np.zeros(RATE, np.float32)
    wave[100] = 0.5
    out = reverberate(wave, RATE, np.random.default_rng(5), (0.2, 0.2))
    rng = np.random.default_rng(5)
    room = synthetic_room(RATE, rng.uniform(0.2, 0.2), rng)  # what reverberate drew
    expected = np.zeros(RATE)
    expected[100 : 100 + len(room)] = room[: RATE - 100]
    expected *= np.sqrt(np.mean(wave.astype(np.float64) ** 2) / np.mean(expected ** 2))
    assert np.allclose(out, expected, atol=1e-6)
    assert np.all(out[:100] == pytest.approx(0.0, abs=1e-6))  # nothing before the sound


def test_training_windows_are_coloured_only_when_asked() -> None:
    wave = np.random.default_rng(0).standard_normal(6000).astype(np.float32) * 0.1
    plain, coloured = AugmentConfig(), dataclasses.replace(AugmentConfig(), **CHANNEL_AUGMENT)
    assert plain.eq_prob == plain.reverb_prob == 0.0
    # off: the generator is left exactly where the window without channel code left it
    rng = np.random.default_rng(1)
    training_window(wave, RATE, RATE, rng, plain, None)
    off_state = rng.bit_generator.state
    windows = [training_window(wave, RATE, RATE, np.random.default_rng(s), coloured, None) for s in range(40)]
    rng = np.random.default_rng(1)
    training_window(wave, RATE, RATE, rng, dataclasses.replace(plain, eq_db=12.0, rt60_s=(0.3, 0.9)), None)
    assert rng.bit_generator.state == off_state  # ranges alone draw nothing
    baseline = [training_window(wave, RATE, RATE, np.random.default_rng(s), plain, None) for s in range(40)]
    differs = sum(not np.allclose(a, b) for a, b in zip(windows, baseline))
    assert differs >= 20  # about 1 - 0.5 x 0.7 of them coloured; the rest draw other noise/gain numbers after
    assert all(w.dtype == np.float32 and w.shape == (RATE,) and np.isfinite(w).all() for w in windows)
