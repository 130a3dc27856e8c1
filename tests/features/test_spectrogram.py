"""The torch frontends against plain numpy STFT references, and the log-frequency filterbank."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.features.logmel import LogMel, mel_filterbank
from app.features.spectrogram import LogSpectrogram, band_centres, build_features, log_frequency_filterbank


def _numpy_power_frames(wave: np.ndarray, win: int, hop: int, n_fft: int) -> np.ndarray:
    """Unpadded frames, periodic Hann window, |rfft|^2 in float64: the textbook STFT."""
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)
    n_frames = 1 + (len(wave) - win) // hop
    frames = np.stack([wave[i * hop : i * hop + win] * window for i in range(n_frames)])
    return np.abs(np.fft.rfft(frames, n=n_fft, axis=1)) ** 2


@pytest.fixture
def noisy_chirp() -> np.ndarray:
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    return (0.5 * np.sin(2 * np.pi * (200 + 1500 * t) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_log_spectrogram_matches_numpy_reference(noisy_chirp: np.ndarray) -> None:
    spec = LogSpectrogram(16000)  # paper 000: 1024-point FFT, 64 ms window, 32 ms hop
    assert (spec.win, spec.hop, spec.n_fft) == (1024, 512, 1024)
    got = spec(torch.from_numpy(noisy_chirp)[None])[0].numpy()
    power = _numpy_power_frames(noisy_chirp.astype(np.float64), 1024, 512, 1024)
    want = np.log(power @ log_frequency_filterbank(16000, 1024, 79).T.astype(np.float64) + 1e-8)
    assert got.shape == (1 + (16000 - 1024) // 512, 79) == want.shape
    # float32 FFT vs float64: log powers agree to ~1e-4 where the band has energy
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_log_mel_matches_numpy_reference(noisy_chirp: np.ndarray) -> None:
    mel = LogMel(16000, n_mels=40)
    got = mel(torch.from_numpy(noisy_chirp)[None])[0].numpy()
    power = _numpy_power_frames(noisy_chirp.astype(np.float64), 400, 160, 512)
    want = np.log(power @ mel_filterbank(16000, 512, 40).T.astype(np.float64) + 1e-6)
    np.testing.assert_allclose(got, want, atol=2e-3)


def test_filterbank_rows_sum_to_one_and_none_is_empty() -> None:
    bank = log_frequency_filterbank(16000, 1024, 79)
    assert bank.shape == (79, 513)
    np.testing.assert_allclose(bank.sum(axis=1), 1.0, rtol=1e-5)
    assert (bank >= 0).all() and bank[:, 0].max() == 0  # DC never counted


@pytest.mark.parametrize("freq", [300.0, 1000.0, 3500.0])
def test_a_tone_peaks_in_the_band_centred_nearest_to_it(freq: float) -> None:
    t = np.arange(32000) / 16000
    tone = np.sin(2 * np.pi * freq * t).astype(np.float32)
    frames = LogSpectrogram(16000)(torch.from_numpy(tone)[None])[0].numpy()
    centres = band_centres(16000, 79)
    peak = int(np.argmax(frames.mean(axis=0)))
    # on a log axis the nearest centre is within one band of the peak (triangles overlap)
    nearest = int(np.argmin(np.abs(np.log(centres) - np.log(freq))))
    assert abs(peak - nearest) <= 1


def test_short_input_is_padded_to_one_frame() -> None:
    out = LogSpectrogram(16000)(torch.zeros(2, 100))
    assert out.shape == (2, 1, 79)


def test_build_features_refuses_unknown_kind_and_arguments() -> None:
    assert isinstance(build_features({"kind": "logspec", "sample_rate": 8000, "n_fft": 512, "win_ms": 64, "hop_ms": 32}), LogSpectrogram)
    with pytest.raises(ValueError, match="unknown feature kind"):
        build_features({"kind": "mfcc"})
    with pytest.raises(ValueError, match="does not fit"):
        build_features({"kind": "logmel", "n_bands": 3})


def test_power_spectrum_is_squared_magnitude() -> None:
    from app.features.filterbank import power_spectrum

    rng = np.random.default_rng(3)
    values = rng.standard_normal((4, 7, 33)) + 1j * rng.standard_normal((4, 7, 33))
    values[0, 0, :5] = [0, 1e-15, 1e15j, -3 + 4j, 1e-3 - 1e-3j]  # zero, tiny, large (squares stay normal floats), 3-4-5
    spectrum = torch.from_numpy(values.astype(np.complex64))
    got = power_spectrum(spectrum)
    assert got.dtype == torch.float32 and got.shape == spectrum.shape
    reference = np.abs(values.astype(np.complex64).astype(np.complex128)) ** 2
    np.testing.assert_allclose(got.numpy(), reference, rtol=1e-6, atol=0)
    assert got[0, 0, 3].item() == 25.0


def test_one_power_spectrum_serves_two_log_mels_with_the_same_framing(noisy_chirp: np.ndarray) -> None:
    wave = torch.from_numpy(noisy_chirp)[None]
    bands64, bands40 = LogMel(16000, n_mels=64), LogMel(16000, n_mels=40)
    assert bands64.same_framing(bands40) and bands40.same_framing(bands64)
    power = bands64.power(wave)
    np.testing.assert_allclose(power[0].numpy(), _numpy_power_frames(noisy_chirp.astype(np.float64), 400, 160, 512),
                               rtol=1e-3, atol=1e-5)
    assert torch.equal(bands40.from_power(power), bands40(wave)) and torch.equal(bands64.from_power(power), bands64(wave))
    assert not bands64.same_framing(LogMel(16000, hop_ms=12.5, n_mels=64))
    assert not bands64.same_framing(LogMel(8000, n_mels=64))
