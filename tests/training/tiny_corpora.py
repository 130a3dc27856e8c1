"""A tiny data folder shaped like ../shared/data, and one tiny `recall train general-audio` run on it.

Shared by tests/training/test_general_audio.py and test_speech_swap.py through tests/training/conftest.py,
which builds each once per test session (the run synthesises speech with espeak-ng and fits a router).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from app.encoders.checkpoint import save_checkpoint
from app.training.general_audio import recipe as general_audio
from app.training.audio.train import TrainConfig, build_model, model_config

RATE = 16000


def write(path: Path, wave: np.ndarray, rate: int = RATE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, wave.astype(np.float32), rate)


def csv_file(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)


def voice(freq: float, seed: int, seconds: float = 0.8, rate: int = RATE) -> np.ndarray:
    """A vowel-like harmonic tone with a little noise: "speech" the router can tell from noise textures."""
    t = np.arange(int(seconds * rate)) / rate
    wave = sum(np.sin(2 * np.pi * freq * h * t) / h for h in range(1, 6)) * np.hanning(len(t))
    return 0.2 * wave + 0.01 * np.random.default_rng(seed).standard_normal(len(t))


def texture(kind: int, seed: int, seconds: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(int(seconds * RATE))
    if kind == 0:  # hiss
        return 0.1 * noise
    if kind == 1:  # low rumble
        return 0.3 * np.convolve(noise, np.ones(64) / 64, mode="same")
    return 0.1 * noise * (np.arange(len(noise)) % 4000 < 800)  # ticking bursts


def make_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    asc_rows = []
    for k, word in enumerate(["yes", "no", "up"]):  # "up" is a held-out keyword
        for speaker in ["00000002", "00000003", "00000001"]:  # 00000001 is a held-out speaker
            for take in range(2):
                rel = f"audio/{word}/{speaker}_{take}.wav"
                write(root / "asc" / rel, voice(150 + 60 * k, seed=take + 7 * k))
                asc_rows.append([rel, word, speaker, str(take), "train"])
    csv_file(root / "asc" / "asc.csv", ["file", "keyword", "speaker", "take", "split"], asc_rows)
    fsdd_rows = []
    for digit in range(3):  # 2 is a held-out digit word
        for speaker in ["george", "jackson"]:  # jackson is held out
            rel = f"recordings/{digit}_{speaker}_0.wav"
            write(root / "fsdd" / rel, voice(300 + 50 * digit, seed=digit, rate=8000), rate=8000)
            fsdd_rows.append([rel, str(digit), speaker, "0", "train"])
    csv_file(root / "fsdd" / "fsdd.csv", ["file", "digit", "speaker", "index", "split"], fsdd_rows)
    esc_rows = []
    for k, category in enumerate(["wind", "frog", "clock_tick", "rain"]):  # rain is held out
        for take in range(3):
            rel = f"audio/{category}-{take}.flac"
            write(root / "esc50" / rel, texture(k % 3, seed=10 * k + take))
            esc_rows.append([rel, category])
    csv_file(root / "esc50" / "esc50.csv", ["filename", "category"], esc_rows)
    return root


def make_speech_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="tiny-speech", bits=32,
                      sample_rate=8000, window_s=1.0, hop_s=0.5, hidden=8, heads=2, d_a=6)
    config = model_config(cfg)
    _, net = build_model(config)
    return save_checkpoint(tmp_path_factory.mktemp("speech") / "tiny-speech", net.state_dict(), config)


SMALL_SYNTH = ["--pseudo-words", "1", "--pseudo-voices", "2", "--languages", "de,es", "--english-words", "2",
               "--english-voices", "2", "--digit-voices", "2", "--router-clips", "10"]


def make_built(data: Path, speech_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], Path]:
    """(checkpoint, its command's arguments, work folder) of one tiny `recall train general-audio` run."""
    root = tmp_path_factory.mktemp("general-audio")
    out, work = root / "general-audio", root / "work"
    argv = ["--data", str(data), "--out", str(out), "--work", str(work), "--speech-from", str(speech_checkpoint),
            *SMALL_SYNTH, "--version", "3"]
    assert general_audio.main(argv) == 0
    return out, argv, work


def voice_and_hiss() -> list[np.ndarray]:
    return [voice(200, seed=99, seconds=1.0).astype(np.float32), texture(0, seed=99, seconds=1.0).astype(np.float32)]


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
