"""Version 6's recipe steps of `recall train general-audio`: --speech-swap-into, --speech-frontend, --without.

The tiny data folder and the tiny version-5-like run come from tests/training/tiny_corpora.py (built once
per session in conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.checkpoint import load_checkpoint, save_checkpoint
from app.encoders.registry import load_checkpoint_dir
from app.training.general_audio import recipe as general_audio
from app.training.audio.train import TrainConfig, build_model, model_config
from tests.training.tiny_corpora import RATE, files as _files, voice_and_hiss as _voice_and_hiss


@pytest.fixture(scope="module")
def pretrained_speech_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny attn-hash head on speech_embedding frames at the service rate (version 6's speech branch, untrained)."""
    torch.manual_seed(0)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="tiny-pretrained", bits=32,
                      sample_rate=RATE, window_s=1.0, hop_s=0.5, hidden=8, heads=2, d_a=6,
                      features={"kind": "speech-embedding", "pad_s": 0.0},
                      holdout=["00000001"], extra_manifests=["fsdd-train.csv"])
    config = model_config(cfg)
    _, net = build_model(config)
    return save_checkpoint(tmp_path_factory.mktemp("pretrained") / "tiny-pretrained", net.state_dict(), config)


@pytest.mark.system("espeak-ng")
def test_speech_swap_keeps_the_sounds_branch_and_router_and_drops_the_old_views(
        built: tuple[Path, list[str], Path], data: Path, pretrained_speech_checkpoint: Path, tmp_path: Path) -> None:
    source, _, _ = built
    with_views = tmp_path / "with-views"  # the old speech branch's views must not survive the swap
    assert general_audio.main(["--data", str(data), "--views-from", str(source), "--whiten-eps", "0.3",
                               "--mfcc-bits", "8", "--out", str(with_views), "--version", "5"]) == 0
    stored = json.loads((with_views / "config.json").read_text())
    del stored["licence"]  # as version 5's config, written before the field: the swap tells it from the data
    (with_views / "config.json").write_text(json.dumps(stored))
    out = tmp_path / "v6"
    argv = ["--data", str(data), "--speech-from", str(pretrained_speech_checkpoint), "--speech-swap-into", str(with_views),
            "--out", str(out), "--version", "6"]
    assert general_audio.main(argv) == 0

    assert _files(out / "sounds") == _files(with_views / "sounds")  # byte for byte
    assert _files(out / "speech") == _files(pretrained_speech_checkpoint)
    old_state, new_state = load_checkpoint(with_views)[0], load_checkpoint(out)[0]
    assert sorted(new_state) == ["bias", "mean", "scale", "weight"]  # the router alone: no views.*
    for key in new_state:
        assert torch.equal(old_state[key], new_state[key]), key
    config = json.loads((out / "config.json").read_text())
    assert config["version"] == "6" and "speech_views" not in config
    assert config["holdout"]["asc_speakers"] == ["00000001"]
    assert config["holdout"]["fsdd_words"] == list(general_audio.FSDD_HOLDOUT_WORDS)  # the extra FSDD manifest held them out
    assert config["speech_swap"]["sounds_and_router_from"]["version"] == "5"
    assert config["licence"].startswith("non-commercial")  # the ESC-50 sounds branch and router it kept
    card = (out / "DATA.md").read_text()
    assert "speech_embedding" in card and "Apache-2.0" in card and "non-commercial" in card
    assert config["reproduce"]["train"] == "recall train general-audio " + " ".join(argv)

    old, new = load_checkpoint_dir(with_views), load_checkpoint_dir(out)
    waves = _voice_and_hiss()
    assert np.array_equal(old.speech_probability(waves), new.speech_probability(waves))  # routes exactly as before
    assert (new.bits, new.dim) == (32 + 256, 32 + 256)
    bits = np.unpackbits(new.encode(waves).codes, axis=1, bitorder="little")
    assert bits[0, 32:].sum() == 0 and bits[1, :32].sum() == 0
    with pytest.raises(SystemExit, match="--speech-from"):
        general_audio.main(["--data", str(data), "--speech-swap-into", str(with_views), "--out", str(tmp_path / "x")])


@pytest.mark.system("espeak-ng")
def test_speech_frontend_trains_the_head_then_swaps_it_in_one_command(
        built: tuple[Path, list[str], Path], data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 6's whole recipe: --speech-frontend trains paper 004's head on the frozen front-end, then swaps it in."""
    from app.training.general_audio import speech_swap

    source, _, _ = built
    recipe_argv = speech_swap.frontend_speech_argv
    # the tiny data has two training speakers: one validates (the recipe's two would leave none to train on)
    monkeypatch.setattr(speech_swap, "frontend_speech_argv", lambda *a: [*recipe_argv(*a), "--val-groups", "1"])
    out, work = tmp_path / "v6", tmp_path / "work"
    argv = ["--data", str(data), "--work", str(work), "--speech-frontend", "speech-embedding:0.4", "--bank-copies", "1",
            "--speech-epochs", "1", "--speech-steps", "2", "--speech-swap-into", str(source), "--out", str(out),
            "--version", "6"]
    assert general_audio.main(argv) == 0
    speech = json.loads((out / "speech" / "config.json").read_text())
    assert speech["features"] == {"kind": "speech-embedding", "pad_s": 0.4}
    assert speech["training"]["bank_copies"] == 1 and speech["training"]["holdout"] == ["00000001"]  # the held-out speaker this data has
    assert (work / "speech-frontend" / "FINISHED").is_file() and not (work / "speech-frontend" / "train_state.pt").exists()
    assert _files(out / "sounds") == _files(source / "sounds")
    config = json.loads((out / "config.json").read_text())
    assert config["reproduce"]["train"] == "recall train general-audio " + " ".join(argv)
    assert config["holdout"]["fsdd_words"] == list(general_audio.FSDD_HOLDOUT_WORDS)
    bits = np.unpackbits(load_checkpoint_dir(out).encode(_voice_and_hiss()).codes, axis=1, bitorder="little")
    assert bits[1, :256].sum() == 0  # the hiss still goes to the sounds half
    with pytest.raises(SystemExit, match="not both"):
        general_audio.main([*argv, "--speech-from", str(out / "speech")])


def test_speech_frontend_leaves_one_corpus_out_of_the_head(data: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--without with --speech-frontend: the head's data lacks that corpus (the front-end is fixed)."""
    import argparse

    from app.training.general_audio import speech_swap

    def argv(without):
        args = argparse.Namespace(without=without, speech_frontend="speech-embedding:0.4", bank_copies=4, speech_epochs=30,
                                  speech_steps=100, speech_patience=6, seed=0, threads=1, device="cpu")
        return speech_swap.frontend_speech_argv(data, tmp_path / "fsdd-train.csv", tmp_path / "out", args)

    assert "--extra-manifest" in argv(None) and argv(None)[1].endswith("asc.csv")
    without_fsdd = argv("fsdd")
    assert "--extra-manifest" not in without_fsdd and not any("fsdd" in a for a in without_fsdd)
    without_asc = argv("asc")
    assert without_asc[:2] == ["--manifest", str(tmp_path / "fsdd-train.csv")] and not any("asc" in a for a in without_asc)
    # the commercial recipe's leave-one-corpus-out runs leave ESC-50 out as well: the head is the same
    assert argv("fsdd,esc") == without_fsdd and argv("asc,esc") == without_asc
    # --head-synthetic: espeak-ng manifests join as training-only extra data, whichever corpora are left out
    args = argparse.Namespace(without="fsdd,esc", speech_frontend="speech-embedding:0.4", bank_copies=4, speech_epochs=30,
                              speech_steps=100, speech_patience=6, seed=0, threads=1, device="cpu", head_synthetic="none")
    synth = [tmp_path / "pseudo.csv", tmp_path / "en.csv"]
    with_synth = speech_swap.frontend_speech_argv(data, tmp_path / "fsdd-train.csv", tmp_path / "out", args, synth)
    assert [with_synth[i + 1] for i, a in enumerate(with_synth) if a == "--extra-manifest"] == [str(p) for p in synth]
    assert speech_swap.head_synthetic(tmp_path, args) == []  # none: nothing synthesised
    from app.training.general_audio import data as recipe_data

    made = {"pseudo": tmp_path / "p.csv", "synth-en": tmp_path / "e.csv", "digits": tmp_path / "d.csv"}
    monkeypatch.setattr(recipe_data, "synthesise", lambda work, a: made)
    for choice, parts in (("words", ["pseudo", "synth-en"]), ("all", ["pseudo", "synth-en", "digits"]),
                          ("made-up", ["pseudo"]), ("english", ["synth-en"])):
        args.head_synthetic = choice
        assert speech_swap.head_synthetic(tmp_path, args) == [made[part] for part in parts]
    with pytest.raises(SystemExit, match="cannot leave both out"):
        argv("asc,fsdd")
    # leaving ESC-50 out is refused only where it belongs: swapping into a sounds branch and router that heard it
    (tmp_path / "esc-trained").mkdir()
    (tmp_path / "esc-trained" / "config.json").write_text(json.dumps({"family": "routed-fusion", "format_version": 1, "without": None}))
    with pytest.raises(SystemExit, match="trained on ESC-50"):
        general_audio.main(["--data", str(data), "--work", str(tmp_path), "--speech-frontend", "speech-embedding:0.4",
                            "--without", "esc", "--speech-swap-into", str(tmp_path / "esc-trained"),
                            "--out", str(tmp_path / "o")])
    assert not (tmp_path / "speech-frontend").exists()  # refused before any training


def test_the_swap_card_names_only_the_speech_corpora_the_router_heard() -> None:
    from app.training.general_audio.speech_swap import sounds_and_router_rows

    commercial = "\n".join(sounds_and_router_rows({"without": "esc"}))
    assert "Arabic Speech Commands and FSDD training speakers" in commercial and "CC BY 4.0; CC BY-SA 4.0" in commercial
    loco = "\n".join(sounds_and_router_rows({"without": "fsdd,esc"}))
    assert "FSDD" not in loco and "CC BY-SA" not in loco and "Arabic Speech Commands training speakers" in loco
    assert "ESC-50" in "\n".join(sounds_and_router_rows({"without": "fsdd"}))  # the sounds branch heard it


def test_the_swap_cards_speech_head_row_comes_from_what_the_head_trained_on() -> None:
    from app.training.general_audio.card import speech_head_row

    shipped = Path("app/assets/models/general-audio-commercial@1")
    speech = json.loads((shipped / "speech" / "config.json").read_text())
    held = json.loads((shipped / "config.json").read_text())["holdout"]["asc_speakers"]
    row = speech_head_row(speech, held)
    assert row in (shipped / "DATA.md").read_text().splitlines()  # the row the shipped card was written with
    # a leave-one-corpus-out head with the made-up words: FSDD gone, the synthetic speech named, its term added
    loco = {"training": {"manifest": "/d/asc/asc.csv", "extra_manifests": ["w/pseudo/manifest.csv"]}}
    row = speech_head_row(loco, held)
    assert "Free Spoken Digit" not in row and "made-up words in 30 languages" in row
    assert row.endswith("| CC BY 4.0; made by this project |")
    assert "see that manifest's source" in speech_head_row({"training": {"manifest": "/x/mine.csv"}}, held)
