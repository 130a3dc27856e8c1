"""The sounds branch without labels: a head-less texture model is its whitening, turned by a rotation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.registry import load_checkpoint_dir
from app.encoders.audio.texture import TextureNet
from app.training.synthesis.non_speech import varied_non_speech
from app.training.audio.texture_fit import fit_texture_net, HeadTraining
from app.training.general_audio.unlabelled_sounds import WHITEN_DIM, fit_whitening_only

RATE = 16000


def test_a_headless_net_is_its_normalised_whitening_rotated() -> None:
    rng = np.random.default_rng(0)
    stats = rng.standard_normal((200, 12)).astype(np.float32) * np.arange(1, 13, dtype=np.float32)
    net, losses = fit_texture_net(stats, np.zeros(200), {"n_in": 12, "whiten_dim": 6, "head_dim": 0, "bits": 6},
                                  whiten_eps=0.01, head=HeadTraining(), rotation_seed=3)
    assert losses == []  # no labels are used: nothing to train
    assert not any(k.startswith("head.") for k in net.state_dict())
    x = torch.from_numpy(stats[:5])[:, None]
    with torch.no_grad():
        out = net(x).numpy()
        whitened = (torch.from_numpy(stats[:5]) - net.whiten_mean) @ net.whiten
    expected = (whitened / whitened.norm(dim=1, keepdim=True)).numpy() @ net.rotation.numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    # the whitened training statistics are decorrelated, each direction of near unit variance
    white = ((torch.from_numpy(stats) - net.whiten_mean) @ net.whiten).numpy()
    cov = np.cov(white.T)
    assert np.abs(cov - np.diag(np.diag(cov))).max() < 1e-3 and 0.9 < np.diag(cov).min() <= np.diag(cov).max() < 1.01


def test_a_headless_net_still_needs_bits_to_match_its_whitening() -> None:
    with pytest.raises(ValueError, match="whiten_dim \\+ head_dim"):
        TextureNet(12, whiten_dim=6, head_dim=0, bits=8)


def test_whitening_only_checkpoint_loads_and_encodes_as_its_statistics_say(tmp_path: Path) -> None:
    windows = varied_non_speech(300, RATE, RATE, seed=0)
    out = tmp_path / "sounds"
    metrics = fit_whitening_only(windows, out, "sounds", seed=1, sample_rate=RATE, window_s=1.0, hop_s=0.5,
                                 sources={"generated non-speech": len(windows)})
    assert metrics["train_windows"] == 300
    config = json.loads((out / "config.json").read_text())
    assert config["arch"]["head_dim"] == 0 and config["bits"] == WHITEN_DIM
    assert config["training"]["unlabelled_windows"] == {"generated non-speech": 300}

    encoder = load_checkpoint_dir(out)
    probe = varied_non_speech(4, RATE, RATE, seed=9)
    emb = encoder.encode(probe)
    assert emb.floats.shape == (4, WHITEN_DIM) and emb.codes.shape == (4, WHITEN_DIM // 8)
    with torch.no_grad():
        stats = encoder.features(torch.from_numpy(np.stack(probe)))[:, 0]
        whitened = (stats - encoder.net.whiten_mean) @ encoder.net.whiten
        expected = torch.nn.functional.normalize(whitened, dim=1) @ encoder.net.rotation
    np.testing.assert_allclose(emb.floats, expected.numpy(), rtol=1e-4, atol=1e-5)
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little").astype(bool)
    np.testing.assert_array_equal(bits, expected.numpy() > 0)  # the code is the sign of the float
