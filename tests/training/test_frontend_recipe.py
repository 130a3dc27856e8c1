"""The default's one command: ``recall train general-audio --speech-frontend ... --without esc --frontend-bits B`` without
``--speech-swap-into`` (app/training/general_audio/frontend_recipe.py) must equal the four-step chain it replaces."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.checkpoint import load_checkpoint
from app.encoders.registry import load_checkpoint_dir
from app.training.audio.cli import main as audio_main
from app.training.general_audio import recipe as general_audio
from app.training.general_audio import router_data, speech_swap
from app.training.general_audio.data import training_manifests
from tests.training.tiny_corpora import SMALL_SYNTH, files, voice_and_hiss

TINY_HEAD = ["--bank-copies", "1", "--speech-epochs", "1", "--speech-steps", "2"]
COMMERCIAL = ["--without", "esc", "--router-negatives", "varied", "--sounds-without-labels", "whiten"]
SHIPPED = Path("app/assets/models/general-audio-commercial")


@pytest.fixture
def tiny_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(router_data, "VARIED_BASIC_FLOOR", 30)
    monkeypatch.setattr(router_data, "VARIED_WINDOWS", 27)
    recipe_argv = speech_swap.frontend_speech_argv
    # the tiny data has two training speakers: one validates (the recipe's two would leave none to train on)
    monkeypatch.setattr(speech_swap, "frontend_speech_argv", lambda *a: [*recipe_argv(*a), "--val-groups", "1"])


def four_steps(data: Path, work: Path) -> Path:
    """The chain as separate commands (README before the one command): a head, b sounds and router, c swap, d view."""
    head = work / "head"
    args = argparse.Namespace(without="esc", speech_frontend="speech-embedding:0.4", bank_copies=1, speech_epochs=1,
                              speech_steps=2, speech_patience=6, seed=0, threads=1, device="cpu")
    fsdd = training_manifests(data, work, None)["fsdd"]
    assert audio_main(speech_swap.frontend_speech_argv(data, fsdd, head, args)) == 0  # a: speech/config.json's command
    (head / "train_state.pt").unlink(missing_ok=True)
    assert general_audio.main(["--data", str(data), "--work", str(work), *COMMERCIAL, "--speech-from", str(head),
                               *SMALL_SYNTH, "--out", str(work / "b")]) == 0
    assert general_audio.main(["--data", str(data), "--speech-swap-into", str(work / "b"), "--speech-from", str(head),
                               "--out", str(work / "c"), "--version", "1"]) == 0
    assert general_audio.main(["--data", str(data), "--views-from", str(work / "c"), "--frontend-bits", "128",
                               "--out", str(work / "d"), "--version", "2"]) == 0
    return work / "d"


@pytest.mark.system("espeak-ng")
def test_one_command_equals_the_four_step_chain_and_says_what_the_shipped_default_says(
        data: Path, tmp_path: Path, tiny_recipe: None) -> None:
    out, work = tmp_path / "one", tmp_path / "work"
    argv = ["--data", str(data), "--work", str(work), "--speech-frontend", "speech-embedding:0.4", *TINY_HEAD, *COMMERCIAL,
            "--frontend-bits", "128", *SMALL_SYNTH, "--out", str(out), "--name", "general-audio-commercial",
            "--version", "2", "--description", "tiny default"]
    assert general_audio.main(argv) == 0
    chain = four_steps(data, tmp_path / "chain")

    for branch in ("speech", "sounds"):  # weights byte for byte
        assert files(out / branch)["weights.safetensors"] == files(chain / branch)["weights.safetensors"], branch
    ours, theirs = load_checkpoint(out)[0], load_checkpoint(chain)[0]
    assert sorted(ours) == sorted(theirs) and any(k.startswith("views.") for k in ours)
    for key in ours:
        assert torch.equal(ours[key], theirs[key]), key

    config, shipped = (json.loads((d / "config.json").read_text()) for d in (out, SHIPPED))
    assert config["reproduce"]["train"] == "recall train general-audio " + shlex.join(argv)
    assert [s["step"] for s in config["reproduce"]["steps"]] == [
        "speech head", "sounds branch and router", "speech swap", "front-end view"]
    assert config["reproduce"]["steps"][0]["train"].startswith("recall train audio")
    for key in ("licence", "without", "sounds_without_labels", "router_negatives", "family", "name", "version"):
        assert config[key] == shipped[key], key
    for key in ("frontend_bits", "frontend_weight", "mfcc_bits", "whiten_eps", "seed"):
        assert config["speech_views"][key] == shipped["speech_views"][key], key
    assert config["holdout"]["asc_words"] == [] and config["description"] == "tiny default"
    card = (out / "DATA.md").read_text()
    assert "CC BY-NC" not in card and "no non-commercial term" in card and "speech_embedding" in card
    shipped_card = (SHIPPED / "DATA.md").read_text().splitlines()
    same = [line for line in shipped_card if line.startswith(("| speech front-end", "| sounds branch", "| router", "No part"))]
    assert len(same) == 4 and all(line in card.splitlines() for line in same)  # the shipped card's rows, word for word
    assert "is the checkpoint above plus training-free speech views" in card
    # every intermediate checkpoint went under --work, and none of its resumable steps' markers came along
    assert not [p for p in out.rglob("*") if p.name in ("FINISHED", "STEP_FINISHED", "train_state.pt")]
    assert {p.name for p in work.iterdir()} >= {"speech-frontend", "sounds-and-router", "without-views"}

    emb = load_checkpoint_dir(out).encode(voice_and_hiss())
    assert emb.floats.shape[0] == 2 and np.isfinite(emb.floats).all()


@pytest.mark.system("espeak-ng")
def test_a_stopped_one_command_resumes_from_its_finished_steps(data: Path, tmp_path: Path, tiny_recipe: None,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    out, work = tmp_path / "one", tmp_path / "work"
    argv = ["--data", str(data), "--work", str(work), "--speech-frontend", "speech-embedding:0.4", *TINY_HEAD, *COMMERCIAL,
            "--frontend-bits", "128", *SMALL_SYNTH, "--out", str(out)]
    assert general_audio.main(argv) == 0
    first = files(out)

    def no_training(*_a, **_k):
        raise AssertionError("a finished step ran again")

    monkeypatch.setattr(speech_swap, "frontend_speech_argv", no_training)  # the head is not trained again
    monkeypatch.setattr(general_audio, "train_sounds", no_training)
    # as `recall train general-audio ...` runs it: no args.argv, the command is read from sys.argv
    monkeypatch.setattr(sys, "argv", ["recall", "train", "general-audio", *argv])
    assert general_audio.run(general_audio.parse_args(argv)) == 0
    again = files(out)
    assert again.keys() == first.keys() and all(again[k] == first[k] for k in first if k != "metrics.json")
    assert json.loads(again["config.json"])["reproduce"]["train"] == "recall train general-audio " + shlex.join(argv)


def test_the_one_command_refuses_a_second_source_of_the_speech_branch(data: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not with --speech-from"):
        general_audio.main(["--data", str(data), "--speech-frontend", "speech-embedding:0.4", "--speech-from", str(tmp_path),
                            "--out", str(tmp_path / "o")])
