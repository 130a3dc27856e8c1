"""The log-mel channel equalisation (app/features/pretrained/channel_eq.py) against a numpy hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.features.pretrained.channel_eq import BANDS, ChannelEqualiser, fit_global, window_stats
from app.features.spectrogram import build_features


def synthetic_mel(seed: int = 0) -> np.ndarray:
    """Two windows of 20 frames: 12 loud 'speech' frames with a band tilt, 8 frames near the floor."""
    rng = np.random.default_rng(seed)
    mel = rng.normal(0.0, 0.3, (2, 20, BANDS)).astype(np.float32)
    mel[:, :12] += 5.0 + np.linspace(0.0, 1.0, BANDS)  # speech: 50 dB above the pauses, a tilted channel
    mel[1, :12] += 0.7  # the second window louder in every band (another microphone gain)
    return mel


def hand_stats(mel: np.ndarray, frames: str, speech_range: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    means, stds = [], []
    for window in mel:
        level = window.mean(axis=1)
        chosen = window if frames == "all" else window[level >= level.max() - speech_range]
        means.append(chosen.mean(axis=0))
        stds.append(np.maximum(chosen.std(axis=0), 0.05))
    return np.array(means), np.array(stds)


@pytest.mark.parametrize("frames", ["all", "speech"])
def test_window_stats_match_numpy(frames):
    mel = synthetic_mel()
    mean, std = window_stats(torch.from_numpy(mel), frames)
    want_mean, want_std = hand_stats(mel, frames)
    np.testing.assert_allclose(mean.numpy(), want_mean, atol=1e-5)
    np.testing.assert_allclose(std.numpy(), want_std, atol=1e-5)
    if frames == "speech":  # the 8 quiet frames are left out: the mean is the speech frames' level
        assert mean.numpy().mean() > 5.0


@pytest.mark.parametrize("frames,alpha", [("all", 1.0), ("speech", 1.0), ("speech", 0.5)])
def test_mean_equalisation_matches_numpy(frames, alpha):
    mel = synthetic_mel()
    g = np.linspace(1.0, 2.0, BANDS).astype(np.float32)
    out = ChannelEqualiser(g.tolist(), alpha=alpha, frames=frames)(torch.from_numpy(mel)).numpy()
    m_w, _ = hand_stats(mel, frames)
    np.testing.assert_allclose(out, mel - alpha * m_w[:, None] + alpha * g, atol=1e-5)
    if alpha == 1.0:  # each window's selected frames now average exactly to g, whatever the window's channel
        np.testing.assert_allclose(hand_stats(out, frames)[0], np.stack([g, g]), atol=1e-4)


def test_cmvn_matches_numpy_and_removes_gain():
    mel = synthetic_mel()
    g, s_g = np.full(BANDS, 1.5, np.float32), np.full(BANDS, 0.4, np.float32)
    eq = ChannelEqualiser(g.tolist(), s_g.tolist(), frames="speech", variance=True)
    out = eq(torch.from_numpy(mel)).numpy()
    m_w, s_w = hand_stats(mel, "speech")
    np.testing.assert_allclose(out, g + (mel - m_w[:, None]) * (s_g / s_w)[:, None], atol=1e-4)
    # a window and the same window 20 dB louder in every band give the same equalised mel
    louder = torch.from_numpy(mel[:1] + 2.0)
    np.testing.assert_allclose(eq(louder).numpy(), out[:1], atol=1e-4)


def test_fit_global_is_the_mean_of_window_stats():
    mels = [torch.from_numpy(synthetic_mel(0)), torch.from_numpy(synthetic_mel(1)[:1])]
    fitted = fit_global(mels, "speech")
    stats = [hand_stats(m.numpy(), "speech") for m in mels]
    np.testing.assert_allclose(fitted["mean"], np.concatenate([s[0] for s in stats]).mean(axis=0), atol=1e-5)
    np.testing.assert_allclose(fitted["std"], np.concatenate([s[1] for s in stats]).mean(axis=0), atol=1e-5)


def test_bad_options_are_refused():
    g = [0.0] * BANDS
    with pytest.raises(ValueError):
        ChannelEqualiser(g, frames="loud")
    with pytest.raises(ValueError):
        ChannelEqualiser(g[:10])
    with pytest.raises(ValueError):
        ChannelEqualiser(g, variance=True)
    with pytest.raises(ValueError):
        ChannelEqualiser(g, alpha=1.5)


def test_features_config_round_trip_equalises_in_front_of_the_convolutions():
    """A checkpoint's ``features`` entry rebuilds the equaliser; the front-end sees the equalised mel."""
    eq = ChannelEqualiser(np.linspace(1.0, 2.0, BANDS).tolist(), frames="speech", alpha=1.0)
    plain = build_features({"kind": "speech-embedding", "pad_s": 0.4})
    equalised = build_features({"kind": "speech-embedding", "pad_s": 0.4, "equalise": eq.spec()})
    assert equalised.equaliser.spec() == eq.spec()
    rng = np.random.default_rng(0)
    t = np.arange(16000) / 16000
    wave = torch.from_numpy((0.1 * np.sin(2 * np.pi * 440 * t) + 0.01 * rng.normal(size=16000)).astype(np.float32))[None]
    with torch.no_grad():
        want = plain.frontend.net(eq(plain.frontend.logmel(plain.padded(wave))))
        got = equalised(wave)
        unequalised = plain(wave)
    assert got.shape == unequalised.shape == (1, 8, 96)
    assert np.abs(got.numpy() - want.numpy()).max() < 1e-3  # onnxruntime's convolutions vs torch's
    assert np.abs(got.numpy() - unequalised.numpy()).max() > 0.1  # the equalisation changed what the stack saw
