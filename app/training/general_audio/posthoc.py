"""general-audio's modes that train nothing: they start from existing routed-fusion checkpoints.

``--speech-soup`` averages the speech branches of several fine-tunes (app/training/general_audio/speech_soup.py);
``--views-from`` (version 3) adds the training-free speech views (app/training/general_audio/speech_views_fit.py);
``--router-from`` (version 4) fits the router again on the recipe's router windows
(app/training/general_audio/router_refit.py). Both record their own command in the new checkpoint's config.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from app.training.general_audio.router_data import VARIED_BASIC_FLOOR, VARIED_WINDOWS, router_data
from app.training.general_audio.data import synthesise, training_manifests

ROUTER_NOTE = {
    "basic": "generated silence, noise and tones (app/training/general_audio/router_fit.py)",
    "varied": f"at least {VARIED_BASIC_FLOOR} generated windows of silence, noise and tones and {VARIED_WINDOWS} of nine "
              "richer kinds: bursts, impacts, sweeps, harmonic tones, click trains, crackle, tones in noise "
              "(app/training/synthesis/non_speech.py)",
}


def _own_command(args: argparse.Namespace) -> str:
    own = getattr(args, "argv", None) or sys.argv[sys.argv.index("general-audio") + 1:]
    return "recall train general-audio " + shlex.join(own)


def given_steps(args: argparse.Namespace, flags=("--speech-soup", "--views-from", "--router-from", "--speech-init",
                                                  "--speech-from")) -> list[str]:
    """Which of the chain's step flags this command was given."""
    return [flag for flag in flags if getattr(args, flag[2:].replace("-", "_"))]


def one_step(args: argparse.Namespace) -> None:
    """Refuse two steps of the chain in one command: one of them would be silently dropped."""
    modes = given_steps(args)
    if len(modes) > 1:
        raise SystemExit(f"{' and '.join(modes)} are separate steps: run them one after the other")


def _config_update(args: argparse.Namespace, note: str, source: str | Path, addition: str | None,
                   **extra: str) -> dict:
    """What a no-training step writes into the new config: name, version, its own command (and, as the last step
    of --soup-seeds, that one command); the description is --description, else the source's plus ``addition``."""
    from app.encoders.checkpoint import read_config

    recipe = {"recipe": args.recipe} if getattr(args, "recipe", None) else {}
    update = {"name": args.name or Path(args.out).name, "version": args.version, **extra,
              "reproduce": {"train": _own_command(args), "note": note, **recipe}}
    if args.description:
        update["description"] = args.description
    elif addition:
        update["description"] = read_config(source).get("description", "").rstrip(".") + addition
    return update


def fit_views(data: Path, args: argparse.Namespace) -> int:
    """``--views-from``: no training; fit the speech views (app/training/general_audio/speech_views_fit.py) and write --out."""
    from app.training.general_audio.speech_views_fit import fit_views_checkpoint

    if args.whiten_eps is None and not args.mfcc_bits and not args.frontend_bits:
        raise SystemExit("--views-from needs --whiten-eps, --mfcc-bits and/or --frontend-bits")
    views = " and ".join(part for part, on in (("the speech float whitened", args.whiten_eps is not None),
                                               (f"a downsampled-MFCC view with {args.mfcc_bits} bits", args.mfcc_bits),
                                               (f"the frozen front-end's mean frame with {args.frontend_bits} bits",
                                                args.frontend_bits)) if on)
    update = _config_update(args, "minutes on CPU: no network is trained, the statistics are fitted on training-side windows",
                            args.views_from, f"; plus training-free speech views: {views}")
    out = fit_views_checkpoint(data, Path(args.views_from), Path(args.out), args.whiten_eps, args.mfcc_bits, args.seed, update,
                               args.frontend_bits)
    print(f"speech views (whiten eps {args.whiten_eps}, {args.mfcc_bits} MFCC bits, {args.frontend_bits} front-end bits) "
          f"fitted -> {out}")
    return 0


def refit_router(data: Path, work: Path, args: argparse.Namespace) -> int:
    """``--router-from``: no training; the source's router fitted again on this recipe's router windows."""
    from app.training.general_audio.router_refit import refit_router_checkpoint

    def windows(without: str | None):
        manifests = training_manifests(data, work, without)
        return router_data(manifests, synthesise(work, args), args.seed, args.router_clips, args.router_negatives)

    update = _config_update(args, "minutes on CPU once --work holds the synthetic speech: only the router is fitted",
                            args.router_from,
                            "; its router also learned from varied generated non-speech"
                            if args.router_negatives == "varied" else None, router_negatives=args.router_negatives)
    note = (f"The router of version {args.version} was fitted again (`--router-from`) on the same data plus "
            f"{ROUTER_NOTE[args.router_negatives]}, made by this project.")
    metrics = refit_router_checkpoint(Path(args.router_from), Path(args.out), windows, update, note)
    accuracy = metrics["router_accuracy"]
    print(f"router ({args.router_negatives} negatives) accuracy speech {accuracy['speech']:.3f}, "
          f"non-speech {accuracy['non_speech']:.3f} -> {args.out}")
    return 0


def make_soup(data: Path, args: argparse.Namespace) -> int:
    """``--speech-soup``: no training; one speech branch averaged from several fine-tunes, written to --out."""
    from app.training.general_audio.speech_soup import soup_checkpoint

    sources = [Path(part) for part in args.speech_soup.split(",") if part]
    update = _config_update(args, "minutes on CPU: the speech branches are averaged, the hash layer's statistics "
                            "estimated again", sources[0], f"; its speech branch the weight average of {len(sources)} fine-tunes")
    metrics = soup_checkpoint(data, sources, Path(args.out), args.seed, update)
    print(f"speech soup of {len(sources)} fine-tunes ({metrics['hash_norm_windows']} windows for the hash layer's "
          f"statistics) -> {args.out}")
    return 0
