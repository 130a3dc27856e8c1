"""espeak-ng words for extra training data: rate, trimming, voices, manifest, determinism."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.training.audio.data import read_manifest
from app.training.audio.train import _describe_extra
from app.training.synthesis.speech import DEFAULT_WORDS, RESERVED, choose_voices, main, synthesise_words, trim_silence

pytestmark = pytest.mark.system("espeak-ng")

RATE = 8000


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2 words x 2 voices through the command line."""
    root = tmp_path_factory.mktemp("synth")
    (root / "words.txt").write_text("garden\n# a comment\nyellow\ngarden\n")
    out = root / "out"
    assert main(["--words", str(root / "words.txt"), "--voices", "2", "--sample-rate", str(RATE),
                 "--out", str(out), "--seed", "1"]) == 0
    return out / "manifest.csv"


def test_manifest_lists_every_word_in_every_voice(synth: Path) -> None:
    records = read_manifest(synth)
    assert sorted(r.label for r in records) == ["synth:garden"] * 2 + ["synth:yellow"] * 2
    speakers = {r.speaker for r in records}
    assert len(speakers) == 2 and all("-p" in s and "-s" in s for s in speakers)  # voice variant ids
    for record in records:
        info = sf.info(record.path)
        assert info.samplerate == RATE and info.channels == 1 and info.subtype == "PCM_16"
        assert 0.15 < info.duration < 1.5  # one word, not empty, not padded to seconds
    # a training run that uses it records how it was made
    described = _describe_extra(str(synth), records)
    assert described["synth_command"].startswith("python -m app.training.synthesis.speech --words ")


def test_clips_are_trimmed_to_the_speech(synth: Path) -> None:
    for record in read_manifest(synth):
        wave, _ = sf.read(record.path, dtype="float32")
        frames = np.sqrt((wave[: len(wave) // 80 * 80].reshape(-1, 80) ** 2).mean(axis=1))  # 10 ms frames
        loud = frames > frames.max() * 0.01  # -40 dB, the trimming floor
        # trimming keeps a 20 ms margin: speech starts and ends within 3 frames of each edge
        assert loud[:3].any() and loud[-3:].any()
    # espeak-ng's own output starts with more silence than that
    voice = choose_voices(1, 0, ["en-us"], [""])[0]
    raw = Path(synth).parent / "raw.wav"
    subprocess.run(["espeak-ng", *voice.args(), "-w", str(raw), "garden"], check=True)
    raw_wave, raw_rate = sf.read(raw, dtype="float32")
    assert len(trim_silence(raw_wave, raw_rate)) < len(raw_wave) - raw_rate * 0.05


def test_voices_differ_and_a_seed_repeats_every_file(synth: Path, tmp_path: Path) -> None:
    by_word: dict[str, list[np.ndarray]] = {}
    for record in read_manifest(synth):
        by_word.setdefault(record.label, []).append(sf.read(record.path, dtype="float32")[0])
    for first, second in by_word.values():
        assert len(first) != len(second) or not np.array_equal(first, second)
    again = synthesise_words(["garden", "yellow"], n_voices=2, sample_rate=RATE, out=tmp_path, seed=1)
    assert again.read_text() == synth.read_text()
    other = synthesise_words(["garden"], 2, RATE, tmp_path / "other", seed=2)
    assert {r.speaker for r in read_manifest(other)} != {r.speaker for r in read_manifest(synth)}  # another seed
    for mine, theirs in zip(read_manifest(again), read_manifest(synth)):
        assert Path(mine.path).read_bytes() == Path(theirs.path).read_bytes()


def test_default_words_avoid_keywords_and_digits() -> None:
    assert 100 <= len(DEFAULT_WORDS) <= 200 and len(set(DEFAULT_WORDS)) == len(DEFAULT_WORDS)
    keywords = ("backward cancel close digit direction disable down eight enable enter five forward four keyword left "
                "move next nine no ok one open options previous receive record right rotate send seven six start stop "
                "three two undo up yes zero zoom in out").split()
    assert not set(DEFAULT_WORDS) & (set(keywords) | RESERVED)


def test_voices_are_distinct_and_seeded() -> None:
    voices = choose_voices(30, 4, ["en-gb", "en-us"], ["", "f1", "m3"])
    assert len({v.id for v in voices}) == 30
    assert len({(v.language, v.variant) for v in voices[:6]}) == 6  # every timbre before a repeat
    assert choose_voices(30, 4, ["en-gb", "en-us"], ["", "f1", "m3"]) == voices
