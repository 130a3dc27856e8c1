"""siamese-mlp encoder: paper 000 frontend size, centred sign codes, checkpoint round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.audio import siamese
from app.encoders.base import check_embeddings
from app.encoders.checkpoint import CheckpointError, save_checkpoint
from app.training.audio.train import TrainConfig, build_model, model_config


def _config(bits: int = 16) -> dict:
    cfg = TrainConfig(manifest="unused.csv", model="siamese-mlp", out="unused", name="tiny-siamese", bits=bits,
                      sample_rate=8000, window_s=0.5, hop_s=0.25)
    config = model_config(cfg)
    config["features"].update(n_fft=512, n_bands=20)  # 64 ms at 8 kHz is 512 samples
    return config


def _waves(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(0.1 * rng.standard_normal(4000)).astype(np.float32) for _ in range(n)]


def test_paper_000_architecture_and_input_size() -> None:
    config = _config()
    _, net = build_model(config)
    # 0.5 s at 8 kHz with a 512-sample window and 256-sample hop: 1 + (4000 - 512) // 256 = 14 frames
    assert net.n_in == 14 * 20
    widths = [m.out_features for m in net.mlp if isinstance(m, torch.nn.Linear)]
    drops = [m.p for m in net.mlp if isinstance(m, torch.nn.Dropout)]
    assert widths == [512, 256, 16] and drops == [0.3, 0.3]
    assert sum(isinstance(m, torch.nn.ReLU) for m in net.mlp) == 3  # the output layer too, as in the paper
    config["arch"]["output_relu"] = False
    _, linear_out = build_model(config)
    assert not isinstance(linear_out.mlp[-1], torch.nn.ReLU)


def test_codes_are_signs_after_centring(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = _config()
    features, net = build_model(config)
    net.eval()
    waves = _waves(8)
    with torch.no_grad():
        raw = net(features(torch.from_numpy(np.stack(waves))))
    net.code_mean.copy_(raw.mean(0))  # what the trainer stores after training
    save_checkpoint(tmp_path / "s", net.state_dict(), config)
    emb = check_embeddings(siamese.load(tmp_path / "s", {}).encode(waves), n=8, dim=16, bits=16)
    expected = np.packbits((raw - raw.mean(0)).numpy() > 0, axis=1, bitorder="little")
    np.testing.assert_array_equal(emb.codes, expected)
    # ReLU outputs are >= 0: without centring nearly every bit would be 1
    np.testing.assert_allclose(emb.floats, raw.numpy() / np.linalg.norm(raw.numpy(), axis=1, keepdims=True), rtol=1e-6)


def test_save_load_gives_identical_embeddings(tmp_path: Path) -> None:
    torch.manual_seed(1)
    config = _config()
    _, net = build_model(config)
    save_checkpoint(tmp_path / "s", net.state_dict(), config)
    a = siamese.load(tmp_path / "s", {}).encode(_waves(4))
    b = siamese.load(tmp_path / "s", json.loads((tmp_path / "s" / "config.json").read_text())).encode(_waves(4))
    np.testing.assert_array_equal(a.floats, b.floats)
    np.testing.assert_array_equal(a.codes, b.codes)


def test_window_that_changes_the_input_size_is_refused(tmp_path: Path) -> None:
    config = _config()
    _, net = build_model(config)
    save_checkpoint(tmp_path / "s", net.state_dict(), config)
    config = json.loads((tmp_path / "s" / "config.json").read_text())
    config["window_s"] = 1.0  # 30 frames instead of 14: the MLP cannot take it
    with pytest.raises(CheckpointError, match="network takes"):
        siamese.load(tmp_path / "s", config)
