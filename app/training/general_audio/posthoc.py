"""general-audio's mode that trains nothing: ``--views-from`` starts from an existing routed-fusion checkpoint.

``--views-from`` adds the training-free speech views (app/training/general_audio/speech_views_fit.py; version 3's
whitened float and MFCC bits, ``general-audio-broad``'s frozen front-end bits) and records its own command in the
new checkpoint's config. The speech swap (app/training/general_audio/speech_swap.py) writes its config with
:func:`_config_update` too.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path


def own_argv(args: argparse.Namespace) -> list[str]:
    """This command's arguments: ``args.argv`` where main() set it, else the process's (``recall train`` sets none)."""
    return list(getattr(args, "argv", None) or sys.argv[sys.argv.index("general-audio") + 1:])


def command_of(argv: list[str]) -> str:
    """The ``recall train general-audio`` command line a checkpoint records for ``argv``."""
    return "recall train general-audio " + shlex.join(argv)


def _own_command(args: argparse.Namespace) -> str:
    return command_of(own_argv(args))


def given_steps(args: argparse.Namespace, flags=("--views-from", "--speech-from")) -> list[str]:
    """Which of the chain's step flags this command was given."""
    return [flag for flag in flags if getattr(args, flag[2:].replace("-", "_"))]


def one_step(args: argparse.Namespace) -> None:
    """Refuse two steps of the chain in one command: one of them would be silently dropped."""
    modes = given_steps(args)
    if len(modes) > 1:
        raise SystemExit(f"{' and '.join(modes)} are separate steps: run them one after the other")


def _config_update(args: argparse.Namespace, note: str, source: str | Path, addition: str | None,
                   **extra: str) -> dict:
    """What a no-training step writes into the new config: name, version, its own command; the description is
    --description, else the source's plus ``addition``."""
    from app.encoders.checkpoint import read_config

    update = {"name": args.name or Path(args.out).name, "version": args.version, **extra,
              "reproduce": {"train": _own_command(args), "note": note}}
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
