"""Tiny end-to-end training runs on synthetic tones: the loss falls, checkpoints load, runs resume."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.encoders.base import check_embeddings
from app.encoders.registry import create_encoder, discover
from app.training.audio.train import TrainConfig, Trainer

RATE = 8000
TONES = {"low": 300.0, "mid": 900.0, "high": 2400.0}


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 tone classes x 4 speakers x 3 takes: each 'speaker' has its own level and vibrato."""
    root = tmp_path_factory.mktemp("tones")
    rng = np.random.default_rng(0)
    rows = []
    t = np.arange(int(0.2 * RATE)) / RATE
    for s in range(4):
        for label, freq in TONES.items():
            for take in range(3):
                wobble = 1 + 0.03 * np.sin(2 * np.pi * (3 + s) * t)
                wave = (0.1 + 0.1 * s) * np.sin(2 * np.pi * freq * wobble * t) + 0.02 * rng.standard_normal(t.size)
                path = root / f"{label}-{s}-{take}.wav"
                sf.write(path, wave.astype(np.float32), RATE)
                rows.append({"path": path.name, "label": label, "speaker": f"s{s}"})
    with (root / "manifest.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "speaker"])
        writer.writeheader()
        writer.writerows(rows)
    return root / "manifest.csv"


def _config(manifest: Path, out: Path, model: str, **overrides) -> TrainConfig:
    base = dict(manifest=str(manifest), model=model, out=str(out), name=f"tiny-{model}", bits=16, holdout=["s3"],
                val_groups=1, sample_rate=RATE, window_s=0.25, hop_s=0.125, hidden=8, heads=2, d_a=6,
                epochs=1, steps_per_epoch=3, batch_size=12, lr=3e-3, cache_dir=None, threads=1, quant_warmup=0)
    base.update(overrides)
    config = TrainConfig(**base)
    if model == "siamese-mlp":
        config.features = {"kind": "logspec", "sample_rate": RATE, "n_fft": 512, "win_ms": 64.0, "hop_ms": 32.0, "n_bands": 16}
    return config


def _loss_on_fixed_batch(trainer: Trainer, seed: int = 123) -> float:
    """Loss of one seeded batch without dropout: the same batch before and after training."""
    state = trainer.rng.bit_generator.state
    trainer.rng = np.random.default_rng(seed)
    trainer.net.eval()
    with torch.no_grad():
        loss = float(trainer.step_loss()["total"])
    trainer.rng.bit_generator.state = state
    return loss


def _train_steps(trainer: Trainer, steps: int) -> None:
    trainer.net.train()
    for _ in range(steps):
        loss = trainer.step_loss()["total"]
        trainer.optimiser.zero_grad()
        loss.backward()
        trainer.optimiser.step()


@pytest.mark.parametrize("model", ["siamese-mlp", "attn-hash"])
def test_a_few_steps_lower_the_loss(manifest: Path, tmp_path: Path, model: str) -> None:
    torch.manual_seed(0)
    # contrastive margin 3: random-init distances sit inside it, so negatives start out costly
    margin = 3.0 if model == "siamese-mlp" else 0.5
    trainer = Trainer(_config(manifest, tmp_path / "ck", model, augment=False, margin=margin))
    before = _loss_on_fixed_batch(trainer)
    _train_steps(trainer, 30)
    assert _loss_on_fixed_batch(trainer) < 0.8 * before


def test_spec_augment_masks_training_batches_and_still_learns(manifest: Path, tmp_path: Path) -> None:
    torch.manual_seed(0)
    plain = Trainer(_config(manifest, tmp_path / "a", "attn-hash", augment=False))
    torch.manual_seed(0)
    masked = Trainer(_config(manifest, tmp_path / "b", "attn-hash", augment=False, spec_augment=True))
    # same weights, same seeded batch: only the masks differ, so the loss does
    assert _loss_on_fixed_batch(plain) != _loss_on_fixed_batch(masked)
    before = _loss_on_fixed_batch(plain)  # scored without masks, on the same batch each time
    _train_steps(masked, 30)
    masked.cfg.spec_augment = False
    assert _loss_on_fixed_batch(masked) < 0.8 * before


@pytest.mark.parametrize("model", ["siamese-mlp", "attn-hash"])
def test_run_writes_a_checkpoint_the_registry_loads_and_resumes(manifest: Path, tmp_path: Path, model: str) -> None:
    out = tmp_path / "ck"
    metrics = Trainer(_config(manifest, out, model)).run()
    assert {"val_map", "val_map_hamming", "best_epoch", "history"} <= set(metrics)
    assert json.loads((out / "config.json").read_text())["split"]["holdout"] == ["s3"]
    # resume: a second run asked for two epochs trains only the missing one
    metrics = Trainer(_config(manifest, out, model, epochs=2)).run(resume=True)
    assert [h["epoch"] for h in metrics["history"]] == [1, 2]
    specs = discover([out])
    encoder = create_encoder(f"tiny-{model}", specs)
    waves = [np.zeros(100, np.float32), np.ones(3000, np.float32) * 0.1]
    check_embeddings(encoder.encode(waves), n=2, dim=16, bits=16)
    assert encoder.default_window_s == 0.25 and encoder.sample_rate == RATE


def test_keep_last_runs_every_epoch_and_keeps_the_last(manifest: Path, tmp_path: Path) -> None:
    out = tmp_path / "last"
    # patience 1 would stop "best" after one epoch without progress; "last" ignores it
    metrics = Trainer(_config(manifest, out, "attn-hash", epochs=3, patience=1, lr=0.0, keep="last")).run()
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert metrics["best_epoch"] == 3 and metrics["keep"] == "last"


def test_a_frozen_pretrained_frontend_trains_from_a_bank_of_augmented_windows(manifest: Path, tmp_path: Path) -> None:
    """--frontend speech-embedding --bank-copies 2: the front-end runs once per clip and copy, then never in a step."""
    torch.manual_seed(0)
    out = tmp_path / "ck"
    trainer = Trainer(_config(manifest, out, "attn-hash", window_s=1.0, hop_s=0.5, bank_copies=2, sample_rate=16000,
                              features={"kind": "speech-embedding", "pad_s": 0.4}))
    # each training clip twice; a 1 s window widened by 0.4 s gives 8 frames of 96
    assert trainer.bank.shape == (len(trainer.train_waves), 2, 8, 96)
    assert not torch.equal(trainer.bank[:, 0], trainer.bank[:, 1])  # independent augmentations
    frontend_calls = []
    original = trainer.features.forward
    trainer.features.forward = lambda wave: frontend_calls.append(len(wave)) or original(wave)
    before = _loss_on_fixed_batch(trainer)
    _train_steps(trainer, 30)
    assert frontend_calls == []  # every batch came from the bank
    assert _loss_on_fixed_batch(trainer) < 0.8 * before
    trainer.features.forward = original
    trainer.run()
    encoder = create_encoder("tiny-attn-hash", discover([out]))
    emb = check_embeddings(encoder.encode([np.zeros(4000, np.float32), np.ones(16000, np.float32) * 0.1]), n=2, dim=16, bits=16)
    assert json.loads((out / "config.json").read_text())["features"] == {"kind": "speech-embedding", "pad_s": 0.4}
    assert emb.floats.shape == (2, 16)

