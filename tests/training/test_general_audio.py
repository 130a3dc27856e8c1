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

from app.encoders.checkpoint import load_checkpoint
from app.encoders.registry import load_checkpoint_dir
from app.training.general_audio import recipe as general_audio
from app.training.general_audio import data as general_audio_data
from app.training.general_audio import router_data
from tests.training.tiny_corpora import SMALL_SYNTH, files as _files, voice as _voice, voice_and_hiss as _voice_and_hiss, write as _write

def test_training_manifests_leave_out_every_held_out_group(data: Path, tmp_path: Path) -> None:
    manifests = general_audio_data.training_manifests(data, tmp_path, without=None)
    rows = {key: list(csv.DictReader(path.open())) for key, path in manifests.items()}
    assert {r["label"] for r in rows["asc"]} == {"yes", "no"}
    assert "00000001" not in {r["speaker"] for r in rows["asc"]}
    assert {r["speaker"] for r in rows["fsdd"]} == {"fsdd:george"} and {r["label"] for r in rows["fsdd"]} == {"digit:0", "digit:1"}
    assert "rain" not in {r["label"] for r in rows["esc"]}
    assert all(Path(r["path"]).is_absolute() and Path(r["path"]).is_file() for r in rows["asc"])
    assert set(general_audio_data.training_manifests(data, tmp_path / "loco", without="fsdd")) == {"asc", "esc"}


def test_fine_tuning_keeps_held_out_speakers_out_and_adds_the_english_digits(data: Path, tmp_path: Path) -> None:
    manifests = general_audio_data.training_manifests(data, tmp_path, without=None)
    synth = {"pseudo": tmp_path / "p.csv", "synth-en": tmp_path / "e.csv", "digits": tmp_path / "d.csv"}
    args = general_audio.argparse.Namespace(speech_init="ckpt", speech_epochs=3, speech_steps=5, speech_patience=9, seed=0,
                                            device="cpu", threads=1, speech_channel_augment=False)
    argv = general_audio.speech_argv(data, manifests, synth, tmp_path / "out", args)
    assert "--channel-augment" not in argv
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
    coloured = general_audio.speech_argv(data, manifests, synth, tmp_path / "out",
                                         general_audio.argparse.Namespace(**{**vars(args), "speech_channel_augment": True}))
    assert sorted(coloured) == sorted([*argv, "--channel-augment"])  # the flag reaches the trainer, nothing else changes


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


@pytest.mark.system("espeak-ng")
def test_router_from_fits_only_the_router_again_with_varied_negatives(
        built: tuple[Path, list[str], Path], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, _, work = built
    monkeypatch.setattr(router_data, "VARIED_BASIC_FLOOR", 30)  # the recipe's 600 + 1,800, scaled down
    monkeypatch.setattr(router_data, "VARIED_WINDOWS", 27)
    with_views = tmp_path / "with-views"  # a version-3-like source: its views must come through untouched
    assert general_audio.main(["--data", str(data), "--views-from", str(source), "--whiten-eps", "0.3",
                               "--mfcc-bits", "8", "--out", str(with_views), "--version", "3"]) == 0
    out = tmp_path / "refit"
    argv = ["--data", str(data), "--work", str(work), *SMALL_SYNTH, "--router-from", str(with_views),
            "--router-negatives", "varied", "--out", str(out), "--version", "4"]
    assert general_audio.main(argv) == 0

    for branch in ("speech", "sounds"):
        assert _files(out / branch) == _files(with_views / branch)  # byte for byte
    old_state, new_state = load_checkpoint(with_views)[0], load_checkpoint(out)[0]
    assert set(old_state) == set(new_state)
    for key in old_state:
        same = torch.equal(old_state[key], new_state[key])
        assert same if key.startswith("views.") else (key in ("mean", "scale", "bias", "weight")), key
    assert not torch.equal(old_state["weight"], new_state["weight"])  # the router itself changed
    config = json.loads((out / "config.json").read_text())
    assert config["version"] == "4" and config["router_negatives"] == "varied"
    assert config["router_from"] == {"name": "with-views", "version": "3"}
    assert config["speech_views"] == json.loads((with_views / "config.json").read_text())["speech_views"]
    assert config["reproduce"]["train"] == "recall train general-audio " + " ".join(argv)
    metrics = json.loads((out / "metrics.json").read_text())
    before = json.loads((source / "metrics.json").read_text())["router_windows"]
    real = before["other"] - 20  # the source: 32 real sound windows and the floor of 20 generated ones (32 // 2 < 20)
    assert real == 32 and metrics["router_windows"]["speech"] == before["speech"]
    assert metrics["router_windows"]["other"] == real + 30 + 27  # now a floor of 30 basic and 27 varied
    assert "synthesis/non_speech.py" in (out / "DATA.md").read_text()

    emb = load_checkpoint_dir(out).encode(_voice_and_hiss())
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    assert bits[0, 32 + 8:].sum() == 0 and bits[1, :32].sum() == 0  # still speech and sound (the views' 8 bits ride along)
    with pytest.raises(SystemExit, match="must differ"):
        general_audio.main(["--data", str(data), "--work", str(work), "--router-from", str(out), "--out", str(out)])


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
    card = (out / "DATA.md").read_text()
    assert "ESC-50" not in card and "non-commercial" not in card and not (out / "sounds" / "DATA.md").exists()
    emb = load_checkpoint_dir(out).encode(_voice_and_hiss())
    assert emb.floats.shape[1] == 32 + 256 and np.isfinite(emb.floats).all()


def test_the_data_card_lists_what_trained_each_part_and_leaves_out_the_missing_corpus() -> None:
    from app.training.general_audio.card import data_md

    holdout = {"fsdd_words": ["2"]}
    default = data_md("ga", holdout, "tuned", negatives="varied")
    assert "Arabic Speech Commands" in default and "ESC-50" in default and "non-commercial" in default
    assert "synthesis/non_speech.py" in default and "sped up" in default
    without_asc = data_md("ga", holdout, "scratch", without="asc")
    assert "Arabic Speech Commands" not in without_asc and "Free Spoken Digit" in without_asc
    assert "synthesis/non_speech.py" not in without_asc  # basic negatives only
    whiten = data_md("ga", holdout, "given", without="esc", negatives="varied", sounds_without_labels="whiten")
    assert "ESC-50" not in whiten and "non-commercial" not in whiten and "whitening alone" in whiten
    words = data_md("ga", holdout, "given", without="esc")
    assert "as the texture head's classes" in words and "whitening alone" not in words


def test_soup_recipe_lists_the_chain_and_keeps_the_recipe_options_to_itself() -> None:
    from app.training.general_audio.soup_recipe import fine_tune_options, recipe_steps

    argv = ["--data", "D", "--speech-init", "S", "--speech-epochs", "2", "--soup-seeds", "0,1", "--whiten-eps", "0.3",
            "--mfcc-bits", "64", "--router-negatives", "varied", "--work", "W", "--out", "O", "--version", "5",
            "--seed", "7", "--speech-channel-augment", "--without", "fsdd"]
    assert fine_tune_options(argv) == ["--data", "D", "--speech-init", "S", "--speech-epochs", "2", "--without", "fsdd"]
    steps = recipe_steps(general_audio.parse_args(argv), argv)
    assert len(steps) == 2 * 2 + 3  # two fine-tunes per seed, the soup, the views, the router
    assert [s[s.index("--seed") + 1] for s in steps[:4]] == ["0", "0", "1", "1"]
    assert ["--speech-channel-augment" in s for s in steps[:4]] == [False, True, False, True]
    assert all("--without" in s for s in steps[:4])
    assert steps[4][steps[4].index("--speech-soup") + 1] == "W/plain-s0,W/channel-s0,W/plain-s1,W/channel-s1"
    assert steps[5][steps[5].index("--views-from") + 1] == "W/soup" and "--mfcc-bits" in steps[5]
    assert steps[6][steps[6].index("--router-from") + 1] == "W/soup-views" and steps[6][steps[6].index("--out") + 1] == "O"
    with pytest.raises(SystemExit, match="needs --speech-init"):
        recipe_steps(general_audio.parse_args(["--data", "D", "--soup-seeds", "0", "--out", "O"]), [])
    with pytest.raises(SystemExit, match="drop --views-from"):
        recipe_steps(general_audio.parse_args([*argv, "--views-from", "V"]), argv)


@pytest.mark.system("espeak-ng")
def test_soup_recipe_runs_the_whole_chain_in_one_command(data: Path, tmp_path: Path) -> None:
    import shutil

    # a fine-tune refuses a manifest that lacks any held-out speaker: give each one clip
    data = Path(shutil.copytree(data, tmp_path / "data"))
    with (data / "asc" / "asc.csv").open("a", newline="") as handle:
        for i, speaker in enumerate(general_audio.ASC_HOLDOUT_SPEAKERS):
            rel = f"audio/yes/{speaker}_9.wav"
            _write(data / "asc" / rel, _voice(170, seed=40 + i))
            csv.writer(handle).writerow([rel, "yes", speaker, "9", "train"])
    out, work = tmp_path / "ga5", tmp_path / "work"
    speech_init = Path(__file__).resolve().parents[2] / "app" / "assets" / "models" / "speech-attn-hash"  # the recipe's size
    argv = ["--data", str(data), "--speech-init", str(speech_init), "--speech-epochs", "1", "--speech-steps", "2",
            *SMALL_SYNTH, "--soup-seeds", "0", "--mfcc-bits", "8", "--work", str(work), "--out", str(out), "--version", "5"]
    assert general_audio.main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["reproduce"]["recipe"] == "recall train general-audio " + " ".join(argv)
    assert config["reproduce"]["train"].startswith("recall train general-audio --data")
    assert [Path(i["path"]).name for i in config["speech_soup"]["of"]] == ["plain-s0", "channel-s0"]
    assert "--speech-channel-augment" in config["speech_soup"]["of"][1]["train"]
    assert config["speech_views"]["mfcc_bits"] == 8 and config["version"] == "5"
    # the speech branch is the two fine-tunes' average (the hash layer's statistics estimated again)
    ours, _ = load_checkpoint(out / "speech")
    a, _ = load_checkpoint(work / "plain-s0" / "speech")
    b, _ = load_checkpoint(work / "channel-s0" / "speech")
    for key, value in ours.items():
        if value.is_floating_point() and not key.startswith("hash_norm."):
            torch.testing.assert_close(value, (a[key] + b[key]) / 2)
    assert load_checkpoint_dir(out).encode(_voice_and_hiss()).codes.shape[0] == 2
