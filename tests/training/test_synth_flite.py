"""flite voices for the speech fine-tune (app/training/synth_flite.py), with the real flite and sox."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app.training import general_audio, general_audio_data, synth_flite
from app.training.synth_speech import DEFAULT_WORDS

RATE = 8000


def test_speakers_are_seeded_distinct_and_take_the_voices_in_turn() -> None:
    speakers = synth_flite.choose_speakers(10, seed=3)
    assert [s.id for s in speakers] == [s.id for s in synth_flite.choose_speakers(10, seed=3)]
    assert len({s.id for s in speakers}) == 10
    assert [s.voice for s in speakers[:4]] == list(synth_flite.VOICES)
    assert all(synth_flite.STRETCH[0] <= s.stretch <= synth_flite.STRETCH[1] for s in speakers)
    assert all(synth_flite.CENTS[0] <= s.cents <= synth_flite.CENTS[1] for s in speakers)
    assert speakers[0].id == f"flite:kal16-d{speakers[0].stretch:.2f}-c{speakers[0].cents:+d}"
    with pytest.raises(ValueError):
        synth_flite.choose_speakers(0, seed=0)


def _f0(wave: np.ndarray, rate: int) -> float:
    """Median autocorrelation pitch (60-400 Hz) of the loudest 40 ms frames: a hand reference."""
    frame = int(0.04 * rate)
    frames = np.lib.stride_tricks.sliding_window_view(wave, frame)[:: frame // 2]
    loud = frames[np.argsort((frames ** 2).sum(1))[-8:]]
    lags = np.arange(rate // 400, rate // 60)
    picks = []
    for f in loud:
        f = f - f.mean()
        ac = np.array([(f[:-lag] * f[lag:]).sum() for lag in lags])
        picks.append(rate / lags[int(np.argmax(ac))])
    return float(np.median(picks))


@pytest.mark.system("flite", "sox")
def test_rate_and_pitch_shift_act_as_asked() -> None:
    flite, sox = synth_flite.binaries()
    plain = synth_flite.synthesise(flite, sox, synth_flite.FliteSpeaker("rms", 1.0, 0), "seven", RATE)
    slow = synth_flite.synthesise(flite, sox, synth_flite.FliteSpeaker("rms", 1.25, 0), "seven", RATE)
    high = synth_flite.synthesise(flite, sox, synth_flite.FliteSpeaker("rms", 1.0, 240), "seven", RATE)
    assert plain.dtype == np.float32 and 0.2 * RATE < plain.size < 1.5 * RATE and np.abs(plain).max() <= 1.0
    assert slow.size > 1.1 * plain.size  # duration_stretch 1.25: longer
    assert abs(high.size - plain.size) < 0.05 * plain.size  # sox pitch keeps the duration
    assert _f0(high, RATE) / _f0(plain, RATE) == pytest.approx(2 ** (240 / 1200), rel=0.06)  # +240 cents


@pytest.mark.system("flite", "sox")
def test_words_manifest_labels_each_word_once_per_speaker(tmp_path: Path) -> None:
    manifest = synth_flite.synthesise_words(["apple", "river"], 3, RATE, tmp_path / "out", seed=1)
    rows = list(csv.DictReader(manifest.open()))
    assert sorted(r["label"] for r in rows) == ["synth:apple"] * 3 + ["synth:river"] * 3
    speakers = [s.id for s in synth_flite.choose_speakers(3, seed=1)]
    assert {r["speaker"] for r in rows} == set(speakers)
    for r in rows:
        info = sf.info(manifest.parent / r["path"])
        assert info.samplerate == RATE and info.frames > 0.1 * RATE
    record = json.loads((manifest.parent / "synth.json").read_text())
    assert record["clips"] == 6 and record["speakers"] == speakers and "version: flite-" in record["flite"]


@pytest.mark.system("flite", "sox")
def test_flite_digits_and_words_reach_the_fine_tune_without_the_held_out_digits(tmp_path: Path) -> None:
    args = general_audio.parse_args(["--data", "x", "--out", "y", "--speech-init", "ckpt",
                                     "--flite-digit-voices", "2", "--flite-word-voices", "1"])
    found = general_audio_data.flite_manifests(tmp_path, args)
    assert set(found) == {"flite-digits", "flite-words"}
    digits = list(csv.DictReader(found["flite-digits"].open()))
    held = {"digit:" + d for d in general_audio.FSDD_HOLDOUT_WORDS}
    assert {r["label"] for r in digits} == {f"digit:{d}" for d in range(10)} - held  # labelled as FSDD's own
    assert len(digits) == 2 * 6 and all(r["speaker"].startswith("synth:flite:") for r in digits)
    words = list(csv.DictReader(found["flite-words"].open()))
    assert len(words) == len(DEFAULT_WORDS)  # each everyday word by the one speaker
    synth = {"digits": tmp_path / "d.csv", **found}
    argv = general_audio.speech_argv(Path("data"), {}, synth, tmp_path / "out", args)
    extras = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-manifest"]
    assert extras == [str(synth["digits"]), str(found["flite-digits"]), str(found["flite-words"])]
    off = general_audio.parse_args(["--data", "x", "--out", "y"])
    assert general_audio_data.flite_manifests(tmp_path / "none", off) == {}  # off by default: earlier recipes unchanged
