"""Older checkpoints kept beside the current one: a folder named ``name@version`` answers only for that version."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.checkpoint import save_checkpoint
from app.encoders.registry import create_encoder, discover
from app.training.audio.train import TrainConfig, build_model, model_config


def _checkpoint(folder: Path, version: str, seed: int) -> Path:
    torch.manual_seed(seed)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="tiny", bits=32,
                      sample_rate=8000, window_s=1.0, hop_s=0.5, hidden=8, heads=2, d_a=6)
    config = {**model_config(cfg), "version": version}
    _, net = build_model(config)
    return save_checkpoint(folder, net.state_dict(), config)


def test_an_older_version_folder_is_listed_by_version_only(tmp_path: Path) -> None:
    _checkpoint(tmp_path / "tiny", "2", seed=0)
    _checkpoint(tmp_path / "tiny@1", "1", seed=1)
    specs = discover([tmp_path])
    assert specs["tiny"].version == "2" and specs["tiny@2"].source == specs["tiny"].source
    assert specs["tiny@1"].version == "1" and specs["tiny@1"].source.endswith("tiny@1")
    wave = np.random.default_rng(0).standard_normal(8000).astype(np.float32)
    old, new = create_encoder("tiny@1", specs).encode([wave]), create_encoder("tiny", specs).encode([wave])
    assert not np.allclose(old.floats, new.floats)  # two different networks answer, each for its own key


def test_a_version_folder_that_holds_another_version_is_refused(tmp_path: Path) -> None:
    folder = _checkpoint(tmp_path / "tiny@1", "1", seed=0)
    config = json.loads((Path(folder) / "config.json").read_text())
    (Path(folder) / "config.json").write_text(json.dumps({**config, "version": "3"}))
    with pytest.raises(ValueError, match="tiny@3"):
        discover([tmp_path])
