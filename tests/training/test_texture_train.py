"""The texture-mlp encoder: its fitting maths by hand, and a tiny end-to-end run through the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.encoders.base import check_embeddings
from app.encoders.checkpoint import CheckpointError
from app.encoders.registry import create_encoder, discover
from app.training.audio import cli as audio_cli
from app.training.audio.texture_fit import HeadTraining, fit_texture_net, fit_whitening, random_rotation

RATE = 8000


def test_whitening_gives_unit_covariance_and_shrinks_weak_directions() -> None:
    rng = np.random.default_rng(0)
    mixing = rng.standard_normal((6, 6)) * np.array([5.0, 3.0, 2.0, 1.0, 0.5, 0.1])
    stats = rng.standard_normal((4000, 6)) @ mixing.T + 7.0
    mean, w = fit_whitening(stats, dim=6, eps=0.0)
    np.testing.assert_allclose(np.cov(((stats - mean) @ w).T), np.eye(6), atol=1e-3)
    # with eps, a direction of variance v is scaled to v / (v + eps * v_max): weak ones shrink most
    eps = 0.05
    mean, w = fit_whitening(stats, dim=3, eps=eps)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(stats.T)))[::-1]
    expected = eigenvalues[:3] / (eigenvalues[:3] + eps * eigenvalues[0])
    np.testing.assert_allclose(np.sort(np.diag(np.cov(((stats - mean) @ w).T)))[::-1], expected, rtol=1e-3)


def test_random_rotation_is_orthogonal_seeded_and_keeps_cosines() -> None:
    r = random_rotation(32, seed=3)
    np.testing.assert_allclose(r @ r.T, np.eye(32), atol=1e-5)
    np.testing.assert_array_equal(r, random_rotation(32, seed=3))
    assert not np.allclose(r, random_rotation(32, seed=4))
    a, b = np.random.default_rng(0).standard_normal((2, 32))
    cos = lambda x, y: x @ y / np.linalg.norm(x) / np.linalg.norm(y)  # noqa: E731
    assert cos(a @ r, b @ r) == pytest.approx(cos(a, b), abs=1e-5)


def test_the_metric_head_separates_its_classes() -> None:
    """Four Gaussian blobs in 12-d: after fitting, same-class pairs are far closer than others."""
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((4, 12)) * 3
    labels = np.repeat(np.arange(4), 50)
    stats = (centres[labels] + rng.standard_normal((200, 12))).astype(np.float32)
    arch = {"n_in": 12, "whiten_dim": 8, "hidden": 16, "head_dim": 8, "bits": 16}
    net, losses = fit_texture_net(stats, labels, arch, 0.01, HeadTraining(steps=150, batch_size=32), rotation_seed=0)
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    with torch.no_grad():
        e = torch.nn.functional.normalize(net(torch.from_numpy(stats)[:, None]), dim=1).numpy()
    sim = e @ e.T
    same = labels[:, None] == labels[None, :]
    assert sim[same].mean() > sim[~same].mean() + 0.5


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five sound 'classes' of 0.6 s clips: tones, a chirp, hum and two colours of noise."""
    root = tmp_path_factory.mktemp("sounds")
    rng = np.random.default_rng(0)
    t = np.arange(int(0.6 * RATE)) / RATE
    makers = {
        "tone": lambda: np.sin(2 * np.pi * rng.uniform(400, 450) * t),
        "chirp": lambda: np.sin(2 * np.pi * (300 + rng.uniform(1500, 1800) * t) * t),
        "hum": lambda: np.sin(2 * np.pi * 100 * t) * (1 + np.sin(2 * np.pi * rng.uniform(5, 7) * t)),
        "white": lambda: rng.standard_normal(t.size),
        "brown": lambda: np.cumsum(rng.standard_normal(t.size)) / 30,
    }
    rows = []
    for label, make in makers.items():
        for take in range(4):
            path = root / f"{label}-{take}.wav"
            wave = make()
            sf.write(path, (0.3 * wave / np.abs(wave).max()).astype(np.float32), RATE)
            rows.append({"path": path.name, "label": label})
    with (root / "manifest.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return root / "manifest.csv"


def _train(manifest: Path, out: Path, *extra: str) -> int:
    return audio_cli.main([
        "--manifest", str(manifest), "--model", "texture-mlp", "--out", str(out), "--name", "tiny-texture",
        "--sample-rate", str(RATE), "--window", "0.5", "--hop", "0.25", "--train-hop", "0.05", "--bits", "16",
        "--whiten-dim", "8", "--steps", "60", "--batch-size", "16", "--cv-folds", "2", "--cv-classes", "2",
        "--cache-dir", "", "--threads", "1", "--holdout", "brown", *extra,
    ])


@pytest.fixture(scope="module")
def checkpoint(manifest: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ck") / "tiny-texture"
    assert _train(manifest, out) == 0
    return out


def test_training_writes_a_checkpoint_the_registry_loads(checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    metrics = json.loads((checkpoint / "metrics.json").read_text())
    assert config["family"] == "texture-mlp" and config["bits"] == 16
    assert config["split"]["train"] == ["chirp", "hum", "tone", "white"]  # never the held-out class
    assert config["command"].startswith("recall train audio ") and "--holdout brown" in config["command"]
    assert len(metrics["cv_folds"]) == 2 and all(0.0 < f["map"] <= 1.0 for f in metrics["cv_folds"])
    assert metrics["loss_last"] < metrics["loss_first"]

    encoder = create_encoder("tiny-texture", discover([checkpoint]))
    assert (encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s) == (RATE, 0.5, 0.25)
    rng = np.random.default_rng(5)
    clips = [rng.standard_normal(n).astype(np.float32) * 0.1 for n in (4000, 1000, 9000)]  # exact, short, long
    out = encoder.encode(clips)
    check_embeddings(out, n=3, dim=encoder.dim, bits=encoder.bits)
    # the codes are the signs of the (unnormalised) embedding, so Hamming and cosine agree in sign
    np.testing.assert_array_equal(np.unpackbits(out.codes, axis=1, bitorder="little").astype(bool), out.floats > 0)
    # reloading gives identical embeddings
    again = create_encoder("tiny-texture", discover([checkpoint])).encode(clips)
    np.testing.assert_array_equal(out.floats, again.floats)
    np.testing.assert_array_equal(out.codes, again.codes)


def test_the_held_out_class_is_retrieved_by_its_own_kind(checkpoint: Path, manifest: Path) -> None:
    """Brown noise was never seen: its clips still find each other before tones and chirps."""
    encoder = create_encoder("tiny-texture", discover([checkpoint]))
    root = manifest.parent
    names = [p for p in sorted(root.glob("*.wav"))]
    waves = [sf.read(p, dtype="float32")[0][:4000] for p in names]
    e = encoder.encode(waves).floats
    labels = np.array([p.name.split("-")[0] for p in names])
    for q in np.flatnonzero(labels == "brown"):
        order = [i for i in np.argsort(-(e @ e[q])) if i != q]
        assert labels[order[0]] in ("brown", "white")  # a noise, not a tonal class


def test_a_config_that_does_not_fit_the_code_is_refused(checkpoint: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in checkpoint.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    config = json.loads((broken / "config.json").read_text())
    config["features"]["n_mels"] = 32  # more statistics than the network takes
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="inputs"):
        create_encoder("tiny-texture", discover([broken]))


def test_bad_options_exit_with_a_message(manifest: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert _train(manifest, tmp_path / "a", "--holdout", "violin") == 2
    assert "violin" in capsys.readouterr().err
    assert _train(manifest, tmp_path / "b", "--head-dim", "4") == 2
    assert "--bits 16 must equal" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_pcen_statistics_are_on_by_default_and_can_be_left_out(checkpoint: Path, manifest: Path, tmp_path: Path) -> None:
    with_pcen = json.loads((checkpoint / "config.json").read_text())
    assert with_pcen["features"]["pcen"] is True
    assert _train(manifest, tmp_path / "plain", "--no-pcen", "--cv-folds", "0") == 0
    plain = json.loads((tmp_path / "plain" / "config.json").read_text())
    assert plain["features"]["pcen"] is False
    assert with_pcen["arch"]["n_in"] == 2 * plain["arch"]["n_in"]  # the same statistics twice
    create_encoder("tiny-texture", discover([tmp_path / "plain"]))  # and it loads


def test_the_same_command_fits_the_same_weights_with_or_without_cross_validation(manifest: Path, tmp_path: Path) -> None:
    """Seeded: two runs agree bit for bit, and the folds before the final fit do not change it."""
    for name, extra in (("a", ["--cv-folds", "0"]), ("b", ["--cv-folds", "0"]), ("c", [])):
        assert _train(manifest, tmp_path / name, *extra) == 0
    weights = [(tmp_path / name / "weights.safetensors").read_bytes() for name in "abc"]
    assert weights[0] == weights[1] == weights[2]


def test_augmented_copies_add_training_windows_owned_by_their_clips(checkpoint: Path, manifest: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture) -> None:
    plain = json.loads((checkpoint / "metrics.json").read_text())  # the default: no copies
    assert json.loads((checkpoint / "config.json").read_text())["training"]["augment_copies"] == 0
    assert _train(manifest, tmp_path / "copies", "--augment-copies", "2", "--cv-folds", "0") == 0
    with_copies = json.loads((tmp_path / "copies" / "metrics.json").read_text())
    assert json.loads((tmp_path / "copies" / "config.json").read_text())["training"]["augment_copies"] == 2
    assert _train(manifest, tmp_path / "off", "--augment-copies", "2", "--no-augment", "--cv-folds", "0") == 0
    assert json.loads((tmp_path / "off" / "config.json").read_text())["training"]["augment_copies"] == 0
    # each copy is 0.9-1.1x as long as its clip, so it brings about as many windows again
    assert 2.5 * plain["train_windows"] < with_copies["train_windows"] < 3.5 * plain["train_windows"]
    assert _train(manifest, tmp_path / "bad", "--augment-copies", "-1") == 2
    assert "augment copies" in capsys.readouterr().err
