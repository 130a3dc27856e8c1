"""`recall train general-audio` end to end on a tiny data folder shaped like ../shared/data.

The speech branch comes from a tiny checkpoint (``--speech-from``) so the run takes seconds; the
sounds branch, the synthetic speech, the router and the assembled checkpoint are real.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.encoders.checkpoint import save_checkpoint
from app.encoders.registry import load_checkpoint_dir
from app.training import general_audio
from app.training.audio_train import TrainConfig, build_model, model_config

RATE = 16000


def _write(path: Path, wave: np.ndarray, rate: int = RATE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, wave.astype(np.float32), rate)


def _csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def _voice(freq: float, seed: int, seconds: float = 0.8, rate: int = RATE) -> np.ndarray:
    """A vowel-like harmonic tone with a little noise: "speech" the router can tell from noise textures."""
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(np.sin(2 * np.pi * freq * h * t) / h for h in range(1, 6)) * np.hanning(len(t))
    return 0.2 * wave + 0.01 * np.random.default_rng(seed).standard_normal(len(t))


def _texture(kind: int, seed: int, seconds: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(int(seconds * RATE))
    if kind == 0:  # hiss
        return 0.1 * noise
    if kind == 1:  # low rumble
        return 0.3 * np.convolve(noise, np.ones(64) / 64, mode="same")
    return 0.1 * noise * (np.arange(len(noise)) % 4000 < 800)  # ticking bursts


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    asc_rows = []
    for k, word in enumerate(["yes", "no", "up"]):  # "up" is a held-out keyword
        for speaker in ["00000002", "00000003", "00000001"]:  # 00000001 is a held-out speaker
            for take in range(2):
                rel = f"audio/{word}/{speaker}_{take}.wav"
                _write(root / "asc" / rel, _voice(150 + 60 * k, seed=take + 7 * k))
                asc_rows.append([rel, word, speaker, str(take), "train"])
    _csv(root / "asc" / "asc.csv", ["file", "keyword", "speaker", "take", "split"], asc_rows)
    fsdd_rows = []
    for digit in range(3):  # 2 is a held-out digit word
        for speaker in ["george", "jackson"]:  # jackson is held out
            rel = f"recordings/{digit}_{speaker}_0.wav"
            _write(root / "fsdd" / rel, _voice(300 + 50 * digit, seed=digit, rate=8000), rate=8000)
            fsdd_rows.append([rel, str(digit), speaker, "0", "train"])
    _csv(root / "fsdd" / "fsdd.csv", ["file", "digit", "speaker", "index", "split"], fsdd_rows)
    esc_rows = []
    for k, category in enumerate(["wind", "frog", "clock_tick", "rain"]):  # rain is held out
        for take in range(3):
            rel = f"audio/{category}-{take}.flac"
            _write(root / "esc50" / rel, _texture(k % 3, seed=10 * k + take))
            esc_rows.append([rel, category])
    _csv(root / "esc50" / "esc50.csv", ["filename", "category"], esc_rows)
    return root


@pytest.fixture(scope="module")
def speech_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="tiny-speech", bits=32,
                      sample_rate=8000, window_s=1.0, hop_s=0.5, hidden=8, heads=2, d_a=6)
    config = model_config(cfg)
    _, net = build_model(config)
    return save_checkpoint(tmp_path_factory.mktemp("speech") / "tiny-speech", net.state_dict(), config)


def test_training_manifests_leave_out_every_held_out_group(data: Path, tmp_path: Path) -> None:
    manifests = general_audio.training_manifests(data, tmp_path, without=None)
    rows = {key: list(csv.DictReader(path.open())) for key, path in manifests.items()}
    assert {r["label"] for r in rows["asc"]} == {"yes", "no"}
    assert "00000001" not in {r["speaker"] for r in rows["asc"]}
    assert {r["speaker"] for r in rows["fsdd"]} == {"fsdd:george"} and {r["label"] for r in rows["fsdd"]} == {"digit:0", "digit:1"}
    assert "rain" not in {r["label"] for r in rows["esc"]}
    assert all(Path(r["path"]).is_absolute() and Path(r["path"]).is_file() for r in rows["asc"])
    assert set(general_audio.training_manifests(data, tmp_path / "loco", without="fsdd")) == {"asc", "esc"}


def test_fine_tuning_keeps_held_out_speakers_out_and_adds_the_english_digits(data: Path, tmp_path: Path) -> None:
    manifests = general_audio.training_manifests(data, tmp_path, without=None)
    synth = {"pseudo": tmp_path / "p.csv", "synth-en": tmp_path / "e.csv", "digits": tmp_path / "d.csv"}
    args = general_audio.argparse.Namespace(speech_init="ckpt", speech_epochs=3, speech_steps=5, speech_patience=9, seed=0,
                                            device="cpu", threads=1)
    argv = general_audio.speech_argv(data, manifests, synth, tmp_path / "out", args)
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert flag("--init-from") == "ckpt" and flag("--manifest") == str(data / "asc" / "asc.csv")
    assert flag("--holdout").split(",") == list(general_audio.ASC_HOLDOUT_SPEAKERS)
    extras = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-manifest"]
    speeds = tmp_path / "fsdd-train-speeds.csv"
    assert extras == [str(manifests["fsdd"]), str(speeds), str(synth["digits"])]  # no made-up words: digits
    assert flag("--keep") == "last"
    assert flag("--patience") == "9"  # --speech-patience reaches the speech branch's trainer
    real, perturbed = list(csv.DictReader(manifests["fsdd"].open())), list(csv.DictReader(speeds.open()))
    assert len(perturbed) == len(real) * len(general_audio.SPEED_FACTORS)
    assert {r["speaker"] for r in perturbed} == {f"fsdd:george@{f:g}" for f in general_audio.SPEED_FACTORS}
    first, fast = sf.info(real[0]["path"]), sf.info([r["path"] for r in perturbed if r["speaker"].endswith("@1.16")][0])
    assert fast.samplerate == 8000 and abs(fast.frames - first.frames / 1.16) <= 1  # played 1.16 times faster
    scratch = general_audio.speech_argv(data, manifests, synth, tmp_path / "out",
                                        general_audio.argparse.Namespace(**{**vars(args), "speech_init": None}))
    assert "--init-from" not in scratch and scratch[scratch.index("--manifest") + 1] == str(manifests["asc"])


@pytest.mark.system("espeak-ng")
def test_synthetic_digits_carry_fsdd_labels_and_leave_out_the_held_out_words(tmp_path: Path) -> None:
    manifest = general_audio.synthesise_digits(tmp_path, voices=2, seed=0)
    rows = list(csv.DictReader(manifest.open()))
    held = {"digit:" + d for d in general_audio.FSDD_HOLDOUT_WORDS}
    assert {r["label"] for r in rows} == {f"digit:{d}" for d in range(10)} - held
    assert len(rows) == 2 * (10 - len(held)) and all(r["speaker"].startswith("synth:") for r in rows)
    assert all(Path(r["path"]).is_file() for r in rows)


@pytest.mark.system("espeak-ng")
def test_one_command_builds_a_loadable_routed_fusion_checkpoint(data: Path, speech_checkpoint: Path, tmp_path: Path) -> None:
    out = tmp_path / "general-audio"
    argv = ["--data", str(data), "--out", str(out), "--work", str(tmp_path / "work"), "--speech-from", str(speech_checkpoint),
            "--pseudo-words", "1", "--pseudo-voices", "2", "--languages", "de,es", "--english-words", "2",
            "--english-voices", "2", "--digit-voices", "2", "--router-clips", "10", "--version", "3"]
    assert general_audio.main(argv) == 0

    config = json.loads((out / "config.json").read_text())
    assert config["family"] == "routed-fusion" and config["version"] == "3"
    assert config["reproduce"]["train"] == "recall train general-audio " + " ".join(argv)
    assert config["holdout"]["asc_words"] == []  # the given speech branch may have heard every keyword
    assert config["holdout"]["fsdd_words"] == []  # ... and every digit
    assert "ESC-50" in (out / "DATA.md").read_text() and (out / "speech" / "config.json").is_file()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["router_accuracy"]["speech"] > 0.9 and metrics["router_accuracy"]["non_speech"] > 0.9

    encoder = load_checkpoint_dir(out)
    assert (encoder.bits, encoder.dim, encoder.default_window_s, encoder.default_hop_s) == (32 + 256, 32 + 256, 1.0, 0.5)
    voice, hiss = _voice(200, seed=99, seconds=1.0).astype(np.float32), _texture(0, seed=99, seconds=1.0).astype(np.float32)
    emb = encoder.encode([voice, hiss])
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    assert bits[0, 32:].sum() == 0 and bits[1, :32].sum() == 0  # routed to speech and to sounds
