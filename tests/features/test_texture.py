"""Texture statistics against a plain numpy implementation of the same definitions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.features.logmel import LogMel
from app.features.pcen import Pcen
from app.features.spectrogram import build_features
from app.features.texture import TextureStats, modulation_edges


def numpy_texture(mel: np.ndarray, bands: int, mod_bins: int) -> np.ndarray:
    """The statistics of one (frames, n_mels) log-mel matrix, written out loop by loop."""
    frames, n_mels = mel.shape
    mean = mel.mean(0)
    std = np.sqrt(((mel - mean) ** 2).mean(0))
    delta = np.abs(np.diff(mel, axis=0)).mean(0)
    width = n_mels // bands
    coarse = np.stack([mel[:, b * width : (b + 1) * width].mean(1) for b in range(bands)], 1)
    centred = coarse - coarse.mean(0)
    z = centred / (centred.std(0) + 1e-3)
    correlation = [float((z[:, i] * z[:, j]).mean()) for i in range(bands) for j in range(i + 1, bands)]
    hann = np.hanning(frames)
    modulation = []
    for a, b in modulation_edges(frames, mod_bins):
        for band in range(bands):
            power = np.abs(np.fft.rfft(centred[:, band] * hann)) ** 2
            modulation.append(np.log(power[a:b].sum() + 1e-3))
    return np.concatenate([mean, std, delta, correlation, modulation])


def test_statistics_match_the_numpy_reference() -> None:
    rng = np.random.default_rng(0)
    t = np.arange(8000) / 8000
    waves = np.stack([
        0.3 * np.sin(2 * np.pi * 440 * t) * (1 + np.sin(2 * np.pi * 4 * t)),  # a tone beating at 4 Hz
        0.1 * rng.standard_normal(t.size),
    ]).astype(np.float32)
    frontend = TextureStats(sample_rate=8000, n_mels=16, bands=4, mod_bins=5)
    got = frontend(torch.from_numpy(waves))
    mel = LogMel(8000, n_mels=16)(torch.from_numpy(waves)).double().numpy()
    assert got.shape == (2, 1, 3 * 16 + 6 + 4 * len(modulation_edges(mel.shape[1], 5)))
    for row in range(2):
        np.testing.assert_allclose(got[row, 0].numpy(), numpy_texture(mel[row], 4, 5), rtol=1e-4, atol=1e-4)


def test_pcen_statistics_follow_the_log_mel_ones() -> None:
    """With ``pcen`` the same statistics of the PCEN frames (checked in test_pcen.py) are appended."""
    rng = np.random.default_rng(2)
    waves = (0.1 * rng.standard_normal((2, 8000)) * np.linspace(0.2, 1.0, 8000)).astype(np.float32)
    got = TextureStats(sample_rate=8000, n_mels=16, bands=4, mod_bins=5, pcen=True)(torch.from_numpy(waves))
    mel = LogMel(8000, n_mels=16)(torch.from_numpy(waves)).double()
    pcen = Pcen(frames_per_s=100.0)(mel).numpy()
    for row in range(2):
        expected = np.concatenate([numpy_texture(mel[row].numpy(), 4, 5), numpy_texture(pcen[row], 4, 5)])
        np.testing.assert_allclose(got[row, 0].numpy(), expected, rtol=1e-4, atol=1e-4)
    assert build_features({"kind": "texture", "sample_rate": 8000, "n_mels": 16, "bands": 4, "pcen": True}).pcen is not None


def test_the_beating_tone_has_its_modulation_energy_where_the_beat_is() -> None:
    """A 4 Hz amplitude beat puts more envelope power in the bins near 4 Hz than a steady tone does."""
    t = np.arange(16000) / 16000
    steady = 0.3 * np.sin(2 * np.pi * 440 * t)
    beating = steady * (1 + 0.9 * np.sin(2 * np.pi * 4 * t))
    frontend = TextureStats(sample_rate=16000, n_mels=16, bands=4, mod_bins=8)
    out = frontend(torch.from_numpy(np.stack([steady, beating]).astype(np.float32)))[:, 0].numpy()
    frames = frontend.logmel.num_frames(16000)
    edges = modulation_edges(frames, 8)
    # the bin holding 4 Hz: rfft bin k of `frames` frames at 100 frames/s is k * 100 / frames Hz
    target = next(i for i, (a, b) in enumerate(edges) if a * 100 / frames <= 4 < b * 100 / frames)
    band_of_440 = 0  # 440 Hz falls in the lowest quarter of 16 mel bands up to 8 kHz
    modulation = out[:, 3 * 16 + 6 :].reshape(2, len(edges), 4)
    assert modulation[1, target, band_of_440] > modulation[0, target, band_of_440] + 2.0


def test_modulation_bins_are_non_empty_and_cover_the_spectrum() -> None:
    for frames in (3, 10, 50, 198, 1000):
        for n_bins in (2, 8, 12):
            edges = modulation_edges(frames, n_bins)
            assert edges and edges[0][0] == 1 and edges[-1][1] == frames // 2 + 1
            assert all(a < b for a, b in edges)
            assert all(prev[1] == cur[0] for prev, cur in zip(edges, edges[1:]))


def test_bad_configurations_are_refused() -> None:
    with pytest.raises(ValueError, match="divide"):
        TextureStats(n_mels=64, bands=10)
    with pytest.raises(ValueError, match="mod_bins"):
        TextureStats(mod_bins=1)
    with pytest.raises(ValueError, match="3 frames"):
        TextureStats(sample_rate=8000, n_mels=16, bands=4)(torch.zeros(1, 250))
    assert isinstance(build_features({"kind": "texture", "sample_rate": 8000, "n_mels": 16, "bands": 4}), TextureStats)
