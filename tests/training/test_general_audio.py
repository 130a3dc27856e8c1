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

from app.encoders.registry import load_checkpoint_dir
from app.training.general_audio import recipe as general_audio
from app.training.general_audio import data as general_audio_data
from app.training.general_audio import router_data
from tests.training.tiny_corpora import SMALL_SYNTH, voice_and_hiss as _voice_and_hiss

def test_training_manifests_leave_out_every_held_out_group(data: Path, tmp_path: Path) -> None:
    manifests = general_audio_data.training_manifests(data, tmp_path, without=None)
    rows = {key: list(csv.DictReader(path.open())) for key, path in manifests.items()}
    assert {r["label"] for r in rows["asc"]} == {"yes", "no"}
    assert "00000001" not in {r["speaker"] for r in rows["asc"]}
    assert {r["speaker"] for r in rows["fsdd"]} == {"fsdd:george"} and {r["label"] for r in rows["fsdd"]} == {"digit:0", "digit:1"}
    assert "rain" not in {r["label"] for r in rows["esc"]}
    assert all(Path(r["path"]).is_absolute() and Path(r["path"]).is_file() for r in rows["asc"])
    assert set(general_audio_data.training_manifests(data, tmp_path / "loco", without="fsdd")) == {"asc", "esc"}
    assert set(general_audio_data.training_manifests(data, tmp_path / "loco2", without="fsdd,esc")) == {"asc"}


def test_without_takes_a_comma_list_of_corpora_in_one_spelling() -> None:
    import argparse

    parse = general_audio_data.without_corpora
    assert parse("esc") == "esc" and parse("esc,fsdd") == parse("fsdd, esc") == "fsdd,esc"
    assert general_audio_data.left_out("fsdd,esc") == {"fsdd", "esc"} and general_audio_data.left_out(None) == set()
    for bad in ("", "speech", "esc,speech", "asc,fsdd,esc"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(bad)
    with pytest.raises(SystemExit):  # argparse turns the refusal into a usage error
        general_audio.main(["--data", "d", "--out", "o", "--without", "esc,dogs"])


def test_a_speech_branch_from_scratch_trains_on_every_training_side_manifest(data: Path, tmp_path: Path) -> None:
    manifests = general_audio_data.training_manifests(data, tmp_path, without=None)
    synth = {"pseudo": tmp_path / "p.csv", "synth-en": tmp_path / "e.csv", "digits": tmp_path / "d.csv"}
    args = general_audio.argparse.Namespace(speech_epochs=3, speech_steps=5, speech_patience=9, seed=0, device="cpu",
                                            threads=1)
    argv = general_audio.speech_argv(manifests, synth, tmp_path / "out", args)
    flag = lambda name: argv[argv.index(name) + 1]  # noqa: E731
    assert flag("--manifest") == str(manifests["asc"])  # held-out speakers and words already out
    extras = [argv[i + 1] for i, a in enumerate(argv) if a == "--extra-manifest"]
    assert extras == [str(manifests["fsdd"]), *map(str, synth.values())]
    assert "esc" not in " ".join(extras)
    assert flag("--patience") == "9" and flag("--epochs") == "3"  # --speech-* options reach the trainer
    assert flag("--sample-rate") == str(general_audio.SPEECH_RATE) and "--spec-augment" in argv


@pytest.mark.system("espeak-ng")
def test_synthetic_digits_carry_fsdd_labels_and_leave_out_the_held_out_words(tmp_path: Path) -> None:
    manifest = general_audio_data.synthesise_digits(tmp_path, voices=2, seed=0)
    rows = list(csv.DictReader(manifest.open()))
    held = {"digit:" + d for d in general_audio.FSDD_HOLDOUT_WORDS}
    assert {r["label"] for r in rows} == {f"digit:{d}" for d in range(10)} - held
    assert len(rows) == 2 * (10 - len(held)) and all(r["speaker"].startswith("synth:") for r in rows)
    assert all(Path(r["path"]).is_file() for r in rows)


@pytest.mark.system("espeak-ng")
def test_one_command_builds_a_loadable_routed_fusion_checkpoint(built: tuple[Path, list[str], Path]) -> None:
    out, argv, _ = built

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
    emb = encoder.encode(_voice_and_hiss())
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    assert bits[0, 32:].sum() == 0 and bits[1, :32].sum() == 0  # routed to speech and to sounds
    assert config["router_negatives"] == "basic"
    assert "ESC-50" in (out / "DATA.md").read_text() and (out / "sounds" / "DATA.md").is_file()
    assert config["licence"].startswith("non-commercial") and "ESC-50" in config["licence"]  # GET /v1/encoders shows it


@pytest.mark.system("espeak-ng")
def test_without_esc_the_sounds_branch_is_an_unlabelled_whitening(
        built: tuple[Path, list[str], Path], data: Path, speech_checkpoint: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, work = built
    monkeypatch.setattr(router_data, "VARIED_BASIC_FLOOR", 30)
    monkeypatch.setattr(router_data, "VARIED_WINDOWS", 27)
    out = tmp_path / "loco-esc"
    argv = ["--data", str(data), "--out", str(out), "--work", str(tmp_path / "work"), "--speech-from", str(speech_checkpoint),
            *SMALL_SYNTH, "--without", "esc", "--router-negatives", "varied", "--sounds-without-labels", "whiten"]
    assert general_audio.main(argv) == 0

    sounds = json.loads((out / "sounds" / "config.json").read_text())
    assert sounds["arch"]["head_dim"] == 0 and sounds["bits"] == 256
    assert set(sounds["training"]["unlabelled_windows"]) == {"synthetic English words", "generated non-speech"}
    assert sounds["training"]["unlabelled_windows"]["generated non-speech"] == 30 + 27
    config = json.loads((out / "config.json").read_text())
    assert config["without"] == "esc" and config["sounds_without_labels"] == "whiten"
    assert json.loads((out / "metrics.json").read_text())["router_windows"]["other"] == 30 + 27  # no real sounds
    assert config["licence"].startswith("commercial use allowed")
    card = (out / "DATA.md").read_text()
    assert "ESC-50" not in card and "non-commercial" not in card and not (out / "sounds" / "DATA.md").exists()
    emb = load_checkpoint_dir(out).encode(_voice_and_hiss())
    assert emb.floats.shape[1] == 32 + 256 and np.isfinite(emb.floats).all()


def test_the_data_card_lists_what_trained_each_part_and_leaves_out_the_missing_corpus() -> None:
    from app.training.general_audio.card import data_md

    holdout = {"fsdd_words": ["2"]}
    default = data_md("ga", holdout, "given", negatives="varied")
    assert "Arabic Speech Commands" in default and "ESC-50" in default and "non-commercial" in default
    assert "synthesis/non_speech.py" in default and "speech-attn-hash" in default
    without_asc = data_md("ga", holdout, "scratch", without="asc")
    assert "Arabic Speech Commands" not in without_asc and "Free Spoken Digit" in without_asc
    assert "synthesis/non_speech.py" not in without_asc  # basic negatives only
    assert "speech-attn-hash" not in without_asc  # the speech branch trained here
    whiten = data_md("ga", holdout, "given", without="esc", negatives="varied", sounds_without_labels="whiten")
    assert "ESC-50" not in whiten and "non-commercial" not in whiten and "whitening alone" in whiten
    words = data_md("ga", holdout, "given", without="esc")
    assert "as the texture head's classes" in words and "whitening alone" not in words
    # the commercial recipe's leave-one-corpus-out run: both corpora gone from the card, still no ESC-50 term
    commercial_loco = data_md("ga", holdout, "scratch", without="fsdd,esc", sounds_without_labels="whiten")
    assert "Free Spoken Digit" not in commercial_loco and "Arabic Speech Commands" in commercial_loco
    assert "ESC-50" not in commercial_loco and "non-commercial" not in commercial_loco
