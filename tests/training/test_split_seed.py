"""--split-seed: heads trained with several seeds validate on the same speakers, so their validation MAPs compare."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.training.audio import cli as audio_cli
from app.training.audio.train import Trainer
from tests.training.test_audio_extra import _config, _write_tones


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    speakers = [f"s{i}" for i in range(6)]
    return _write_tones(tmp_path_factory.mktemp("split"), {"low": 300.0, "high": 2400.0}, speakers, 2)


def _val(manifest: Path, out: Path, **overrides) -> set[str]:
    trainer = Trainer(_config({"main": manifest}, out, holdout=["s5"], **overrides))
    return {r.speaker for r in trainer.splits.val}


def test_the_validation_speakers_follow_split_seed_not_seed(manifest: Path, tmp_path: Path) -> None:
    by_seed = [_val(manifest, tmp_path / f"a{seed}", seed=seed) for seed in range(6)]
    assert len({frozenset(v) for v in by_seed}) > 1  # without it, the seed moves the validation speaker
    fixed = [_val(manifest, tmp_path / f"b{seed}", seed=seed, split_seed=0) for seed in range(6)]
    assert all(v == by_seed[0] for v in fixed)  # split_seed 0 draws what seed 0 alone draws
    assert "s5" not in set().union(*fixed)


def test_the_command_line_passes_split_seed(manifest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []

    def record_and_stop(self: Trainer, cfg) -> None:  # the config the command built; no training
        seen.append(cfg)
        raise ValueError("stop")

    monkeypatch.setattr(Trainer, "__init__", record_and_stop)
    base = ["--manifest", str(manifest), "--model", "attn-hash", "--out", str(tmp_path / "x")]
    audio_cli.main([*base, "--seed", "3", "--split-seed", "0"])
    audio_cli.main(base)
    assert [(c.seed, c.split_seed) for c in seen] == [(3, 0), (0, None)]
