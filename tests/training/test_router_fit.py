"""Router fitting: separable statistics give a router that separates them; generated non-speech is what it says."""

from __future__ import annotations

import numpy as np
import torch

from app.training.general_audio.router_fit import fit_router, generated_non_speech, with_noise, short_in_window


def test_router_separates_two_clouds_and_reports_its_accuracy() -> None:
    rng = np.random.default_rng(0)
    speech = rng.standard_normal((300, 6)) + np.array([2, 0, 0, 0, 0, 0])
    other = rng.standard_normal((100, 6)) - np.array([2, 0, 0, 0, 0, 0])
    router, accuracy = fit_router(speech, other)
    assert accuracy["speech"] > 0.95 and accuracy["non_speech"] > 0.95
    p = router(torch.tensor([[4.0, 0, 0, 0, 0, 0], [-4.0, 0, 0, 0, 0, 0]])).numpy()
    assert p[0] > 0.9 and p[1] < 0.1


def test_generated_non_speech_has_each_kind_and_is_seeded() -> None:
    waves = generated_non_speech(8, 16000, 16000, seed=3)
    assert len(waves) == 8 and all(w.shape == (16000,) and w.dtype == np.float32 for w in waves)
    assert np.abs(waves[0]).max() < 0.01  # near-silence
    tone = waves[3]  # a steady tone: one dominant frequency
    spectrum = np.abs(np.fft.rfft(tone))
    assert spectrum.max() > 20 * np.median(spectrum)
    assert all(np.array_equal(a, b) for a, b in zip(waves, generated_non_speech(8, 16000, 16000, seed=3)))


def test_noise_is_added_at_the_requested_snr() -> None:
    clean = [np.sin(np.linspace(0, 200, 16000)).astype(np.float32)]
    noisy = with_noise(clean, seed=0, snr_db=(10.0, 10.0))[0]
    noise = noisy - clean[0]
    snr = 10 * np.log10(np.mean(clean[0] ** 2) / np.mean(noise ** 2))
    assert abs(snr - 10.0) < 0.5


def test_short_in_window_is_a_short_energetic_part_alone_in_a_zero_window() -> None:
    rate = 1000
    rng = np.random.default_rng(0)
    quiet, loud = 0.001 * rng.standard_normal(700), np.sin(np.arange(300) / 3.0)
    waves = [np.concatenate([quiet, loud, quiet]).astype(np.float32)]
    (window,) = short_in_window(waves, rate, 1.0, seed=1, seconds=(0.25, 0.25))
    assert window.shape == (1000,) and window.dtype == np.float32
    nonzero = np.flatnonzero(window)
    assert 240 <= len(nonzero) <= 250 and nonzero[-1] - nonzero[0] < 250  # one 0.25 s stretch, zeros around
    assert np.abs(window[nonzero]).mean() > 0.3  # taken from the loud part, not the quiet one
    again = short_in_window(waves, rate, 1.0, seed=1, seconds=(0.25, 0.25))[0]
    np.testing.assert_array_equal(window, again)
