"""`recall train general-audio`: the default audio encoder, from the data folder to the checkpoint, in one command.

    recall train general-audio --data ../shared/data --out app/assets/models/general-audio

Steps (each skipped when its output already exists in ``--work``, so a stopped run resumes):

1. espeak-ng says made-up words in 30 languages (app/training/synthesis/pseudowords.py) and 184 English
   everyday words (app/training/synthesis/speech.py), in many voices, at 8 kHz;
2. the speech branch (attn-hash, paper 004's network) trains on Arabic Speech Commands (held-out
   speakers and held-out keywords removed), FSDD (held-out speakers removed) and the synthetic words;
3. the sounds branch (texture-mlp) fits on the ESC-50 classes not held out, on 1 s windows (with
   ``--without esc --sounds-without-labels whiten``: the statistics' whitening alone, no labels;
   app/training/general_audio/unlabelled_sounds.py);
4. the router (app/training/general_audio/router_fit.py) is fitted on windows of the training speech against
   the training sounds and generated non-speech (``--router-negatives varied``: nine more kinds,
   app/training/synthesis/non_speech.py);
5. the three are written as one ``routed-fusion`` checkpoint (app/encoders/audio/routed_fusion.py).

``--views-from DIR --frontend-bits B`` trains nothing: it takes DIR's branches and router and adds the
training-free speech views (app/training/general_audio/speech_views_fit.py; ``general-audio-broad``).
``--speech-frontend speech-embedding:PAD`` alone runs the chain behind ``general-audio-commercial`` version 2 in one
command: the speech head, the sounds branch and router, the swap, the views (app/training/general_audio/frontend_recipe.py).
``--speech-swap-into DIR`` puts a new speech branch beside DIR's sounds branch and router
(app/training/general_audio/speech_swap.py; ``general-audio`` version 6 and ``general-audio-commercial``).
Versions 2 to 5's steps (the speech fine-tune ``--speech-init``, channel augmentation, ``--router-from``, the
speech soup) left the package in issue 37 part 5; reports/audio/README.md names the last commit that has each.

What is held out (app/training/general_audio/data.py) is what bench/audio/generalisation.py scores on. ``--without
asc|fsdd|esc`` trains the same recipe without one corpus, for the leave-one-corpus-out evaluation.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# the held-out parts are read from here by the bench and the post-hoc steps (``recipe.ASC_HOLDOUT_SPEAKERS``)
from app.training.general_audio.data import (
    ASC_HOLDOUT_SPEAKERS, ASC_HOLDOUT_WORDS, CORPORA, ESC_HOLDOUT_CLASSES, FSDD_HOLDOUT_SPEAKERS,
    FSDD_HOLDOUT_WORDS, HEAD_SYNTHETIC, SPEECH_RATE, synthesise, training_manifests, without_corpora,
)

from app.training.general_audio.router_data import HOP_S, SERVICE_RATE, WINDOW_S, generated_negatives, router_data, sample_waves
FINISHED = "finished"


def speech_argv(manifests: dict[str, Path], synth: dict[str, Path], out: Path, args: argparse.Namespace) -> list[str]:
    """The speech branch's `recall train audio` arguments when no ``--speech-from`` is given: trained from scratch."""
    common = ["--model", "attn-hash", "--bits", "256", "--sample-rate", str(SPEECH_RATE), "--window", str(WINDOW_S),
              "--hop", str(HOP_S), "--hidden", "96", "--val-groups", "1", "--epochs", str(args.speech_epochs),
              "--steps", str(args.speech_steps), "--patience", str(args.speech_patience), "--lr-patience", "3", "--spec-augment",
              "--seed", str(args.seed), "--device", args.device, "--threads", str(args.threads), "--name", "speech",
              "--out", str(out)]
    speech = [manifests[k] for k in ("asc", "fsdd") if k in manifests] + list(synth.values())
    main, extra = speech[0], speech[1:]  # held-out speakers and words are already out of these manifests
    return ["--manifest", str(main), *common, *[a for path in extra for a in ("--extra-manifest", str(path))]]


def train_speech(manifests: dict[str, Path], synth: dict[str, Path], out: Path, args: argparse.Namespace) -> None:
    from app.training.audio.cli import main as audio_main

    argv = speech_argv(manifests, synth, out, args)
    if (out / "train_state.pt").is_file():
        argv.append("--resume")  # a stopped run goes on from its last finished epoch
    if audio_main(argv) != 0:
        raise SystemExit("speech branch training failed")


def train_sounds(manifests: dict[str, Path], synth: dict[str, Path], out: Path, args: argparse.Namespace) -> None:
    from app.training.audio.cli import main as audio_main

    if "esc" not in manifests and args.sounds_without_labels == "whiten":
        return whiten_sounds(synth, out, args)
    # without ESC-50 (and ``--sounds-without-labels words``, versions 1-3) the texture head learns
    # from spoken words instead: the only labelled audio left
    source = manifests.get("esc") or synth["synth-en"]
    argv = ["--manifest", str(source), "--model", "texture-mlp", "--bits", "256", "--sample-rate", str(SERVICE_RATE),
            "--window", str(WINDOW_S), "--hop", str(HOP_S), "--steps", "200", "--batch-size", "128", "--pcen",
            "--cv-folds", "0", "--seed", str(args.seed), "--name", "sounds", "--out", str(out)]
    if audio_main(argv) != 0:
        raise SystemExit("sounds branch training failed")


def whiten_sounds(synth: dict[str, Path], out: Path, args: argparse.Namespace) -> None:
    """The sounds branch without labelled sounds: a whitening of the texture statistics alone, fitted on
    a seeded sample of the synthetic English words and the router's generated non-speech
    (app/training/general_audio/unlabelled_sounds.py)."""
    from app.training.general_audio.router_fit import clip_windows
    from app.training.general_audio.unlabelled_sounds import fit_whitening_only

    rng = np.random.default_rng(args.seed)
    words = clip_windows(sample_waves(synth["synth-en"], args.router_clips, rng), SERVICE_RATE, WINDOW_S, HOP_S)
    generated = generated_negatives(0, "varied", args.seed)  # what the router's non-speech is without real sounds
    fit_whitening_only(words + generated, out, "sounds", args.seed, SERVICE_RATE, WINDOW_S, HOP_S,
                       {"synthetic English words": len(words), "generated non-speech": len(generated)})


def run(args: argparse.Namespace) -> int:
    from app.encoders.registry import load_checkpoint_dir
    from app.training.general_audio.card import licence, write_data_card
    from app.training.general_audio.posthoc import _own_command, fit_views, one_step
    from app.training.general_audio.router_fit import assemble, fit_router, texture_statistics

    started = time.time()
    if not args.out and not args.write_manifests:
        raise SystemExit("recall train general-audio: error: --out is required")
    data, work = Path(args.data).resolve(), Path(args.work)  # manifests hold absolute paths
    if args.write_manifests:  # the training-side manifests alone, e.g. for `recall train audio --extra-manifest`
        for corpus, path in training_manifests(data, work, args.without).items():
            print(f"{corpus}: {path}")
        return 0
    if args.speech_frontend and not args.speech_swap_into:  # the whole chain (app/training/general_audio/frontend_recipe.py)
        from app.training.general_audio.frontend_recipe import run_chain

        if args.speech_from or args.views_from:
            raise SystemExit("--speech-frontend trains the speech head itself: not with --speech-from or --views-from")
        return run_chain(args, run)
    if args.speech_swap_into:  # version 6: a new speech branch beside an existing sounds branch and router
        from app.training.general_audio.speech_swap import swap_speech

        if bool(args.speech_from) == bool(args.speech_frontend):
            raise SystemExit("--speech-swap-into needs the new speech branch: --speech-from DIR, or --speech-frontend "
                             "to train one (not both)")
        return swap_speech(args)
    one_step(args)
    if args.views_from:  # nothing trained (app/training/general_audio/posthoc.py)
        return fit_views(data, args)
    manifests = training_manifests(data, work, args.without)
    synth = synthesise(work, args)
    # each recipe's sounds branch in a folder of its own, so a cached branch of another recipe is never reused
    unlabelled = "esc" not in manifests and args.sounds_without_labels == "whiten"
    speech_dir = work / "speech"
    sounds_dir = work / ("sounds-unlabelled" if unlabelled else "sounds")
    if args.speech_from:  # an existing speech checkpoint (it carries its own reproduce command)
        speech_dir = Path(args.speech_from)
    # the trainer writes weights after every better epoch, so "finished" needs its own marker
    elif not (speech_dir / FINISHED).is_file() or args.retrain:
        train_speech(manifests, synth, speech_dir, args)
        (speech_dir / FINISHED).write_text("speech branch training finished\n")
    if not (sounds_dir / "weights.safetensors").is_file() or args.retrain:
        train_sounds(manifests, synth, sounds_dir, args)
    sounds = load_checkpoint_dir(sounds_dir)
    speech_windows, other_windows = router_data(manifests, synth, args.seed, args.router_clips, args.router_negatives)
    router, accuracy = fit_router(texture_statistics(sounds.features, speech_windows),
                                  texture_statistics(sounds.features, other_windows))
    name = args.name or Path(args.out).name
    command = _own_command(args)
    config: dict[str, Any] = {
        "name": name, "modality": "audio", "sample_rate": SERVICE_RATE, "window_s": WINDOW_S, "hop_s": HOP_S,
        "version": args.version,
        "description": args.description or (
            "speech in any language and everyday sounds; a speech network (paper 004) and a "
            "sound-texture model joined by a learned speech/non-speech router into one 512-bit code"),
        "licence": licence(args.without),
        # an existing speech checkpoint may have trained on every keyword: then no keyword is unseen
        "holdout": {"asc_speakers": list(ASC_HOLDOUT_SPEAKERS),
                    "asc_words": [] if args.speech_from else list(ASC_HOLDOUT_WORDS),
                    "fsdd_speakers": list(FSDD_HOLDOUT_SPEAKERS),
                    "fsdd_words": [] if args.speech_from else list(FSDD_HOLDOUT_WORDS),
                    "esc_classes": list(ESC_HOLDOUT_CLASSES)},
        "without": args.without,
        "router_negatives": args.router_negatives,
        **({"sounds_without_labels": args.sounds_without_labels} if args.without == "esc" else {}),
        "reproduce": {"train": command, "note": "CPU; the speech branch takes most of the time"},
    }
    metrics = {"router_accuracy": accuracy, "router_windows": {"speech": len(speech_windows), "other": len(other_windows)},
               "seconds": round(time.time() - started, 1)}
    assemble(args.out, speech_dir, sounds_dir, router, config, metrics)
    write_data_card(Path(args.out), name, config["holdout"],
                    "given" if args.speech_from else "scratch", args.without,
                    args.router_negatives, args.sounds_without_labels)
    print(f"router accuracy speech {accuracy['speech']:.3f}, non-speech {accuracy['non_speech']:.3f} -> {args.out}")
    return 0


def at_least_one(text: str) -> int:
    """``--head-seeds``' argparse type: a count of heads."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("general-audio", help="train the default audio encoder (speech + sounds, routed fusion)")
    p.add_argument("--data", required=True, help="folder with asc/, fsdd/ and esc50/ (../shared/data)")
    p.add_argument("--out", help="checkpoint directory to write (required but with --write-manifests)")
    p.add_argument("--work", default=".gl/general-audio", help="intermediate files: synthetic speech, branches")
    p.add_argument("--name", help="encoder name (default: the out folder's name)")
    p.add_argument("--version", default="1", help="checkpoint version recorded by each collection that uses it")
    p.add_argument("--without", type=without_corpora, metavar="CORPORA",
                   help="leave corpora out of every step, a comma list of " + ", ".join(CORPORA) + " (esc: the "
                   "commercial recipe; fsdd,esc or asc,esc: its leave-one-corpus-out runs)")
    p.add_argument("--pseudo-words", type=int, default=40, help="made-up words per language")
    p.add_argument("--pseudo-voices", type=int, default=6, help="voices per made-up word")
    p.add_argument("--languages", help="comma-separated espeak-ng languages for the made-up words (default: 30)")
    p.add_argument("--english-words", type=int, default=184, help="English everyday words (of 184)")
    p.add_argument("--english-voices", type=int, default=12)
    p.add_argument("--router-clips", type=int, default=600, help="clips per source sampled to fit the router")
    p.add_argument("--router-negatives", choices=["basic", "varied"], default="basic",
                   help="generated non-speech for the router: basic (versions 1-3: silence, noise, tones) or varied "
                        "(version 4: also bursts, impacts, sweeps, harmonic tones, clicks, crackle, ...)")
    p.add_argument("--sounds-without-labels", choices=["words", "whiten"], default="words",
                   help="with --without esc: train the sounds head on spoken words (versions 1-3) or keep the "
                        "unsupervised whitening alone (version 4's recipe)")
    p.add_argument("--speech-epochs", type=int, default=30)
    p.add_argument("--speech-steps", type=int, default=100)
    p.add_argument("--speech-patience", type=int, default=6,
                   help="stop the speech branch after this many epochs without a better validation MAP (a "
                        "from-scratch branch, e.g. --without asc, needs far more than the default)")
    p.add_argument("--retrain", action="store_true", help="train the branches again even if --work has them")
    p.add_argument("--speech-from", metavar="CHECKPOINT_DIR",
                   help="use this attn-hash checkpoint as the speech branch instead of training one")
    p.add_argument("--write-manifests", action="store_true",
                   help="only write the training-side manifests (held-out speakers, words and classes removed) into "
                        "--work and print their paths")
    p.add_argument("--speech-swap-into", metavar="CHECKPOINT_DIR",
                   help="train nothing: this routed-fusion checkpoint's sounds branch and router with --speech-from as "
                        "the speech branch (its speech views, fitted to the old speech branch, are dropped): version 6")
    p.add_argument("--speech-frontend", metavar="speech-embedding:PAD_S",
                   help="train the speech branch as paper 004's head on this frozen pretrained front-end (recall train "
                        "audio --frontend), on ASC and FSDD's training side; with --speech-swap-into, swap it into that "
                        "checkpoint (version 6); without, also train the sounds branch and router and, with "
                        "--frontend-bits, fit the front-end view: general-audio-commercial version 2 in one command")
    p.add_argument("--bank-copies", type=int, default=4,
                   help="with --speech-frontend: augmented windows per training clip whose front-end frames are computed once")
    p.add_argument("--head-synthetic", choices=HEAD_SYNTHETIC, default="none",
                   help="with --speech-frontend: espeak-ng speech the head also trains on: none (version 6's head), "
                        "made-up (made-up words in 30 languages), english (English everyday words), words (both, many "
                        "voices each) or all (also English digits in --digit-voices voices; 2 5 7 9 never synthesised)")
    p.add_argument("--head-seeds", type=at_least_one, default=1,
                   help="with --speech-frontend: train the speech head with this many seeds (--seed onwards), each "
                        "validated on the first seed's speakers, and keep the best by validation MAP (head_seeds.py)")
    p.add_argument("--views-from", metavar="CHECKPOINT_DIR",
                   help="train nothing: take this routed-fusion checkpoint's branches and router and add the "
                        "training-free speech views (--whiten-eps, --mfcc-bits) fitted on training-side windows")
    p.add_argument("--whiten-eps", type=float, default=None,
                   help="with --views-from: whiten the speech float, eigenvalues floored at EPS x the largest")
    p.add_argument("--mfcc-bits", type=int, default=0,
                   help="with --views-from: append the downsampled-MFCC view with this many code bits (multiple of 8)")
    p.add_argument("--frontend-bits", type=int, default=0,
                   help="with --views-from and a speech branch on a pretrained front-end: append the frozen front-end's "
                        "centred mean frame with this many code bits (multiple of 8; version 7: 256)")
    p.add_argument("--digit-voices", type=int, default=48, help="espeak-ng voices per English digit word")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (1: on a shared 2-core machine two spinning threads were 20x slower)")
    p.add_argument("--description", default="")
    p.set_defaults(func=run)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m app.training.general_audio.recipe")
    add_parser(parser.add_subparsers(dest="what", required=True))
    return parser.parse_args(["general-audio", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    args.argv = argv
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
