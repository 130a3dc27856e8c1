"""``recall train general-audio --speech-frontend speech-embedding:PAD`` without ``--speech-swap-into``: the whole
chain behind a speech head on a frozen pretrained front-end (``general-audio-commercial`` version 2), in one command.

    recall train general-audio --data ../shared/data --work W --speech-frontend speech-embedding:0.4 --without esc \\
        --router-negatives varied --sounds-without-labels whiten --frontend-bits 128 --out OUT ...

runs, each step's output under ``--work`` (a stopped run resumes: a finished step is skipped):

a. the speech head on the frozen front-end (speech_swap.py :func:`train_frontend_speech`) -> W/speech-frontend;
b. the sounds branch and router with that head as ``--speech-from`` (recipe.py :func:`run`) -> W/sounds-and-router;
c. ``--speech-swap-into`` b ``--speech-from`` a, which writes a pretrained front-end head's config and DATA.md
   (speech_swap.py :func:`swap_speech`) -> W/without-views;
d. with ``--frontend-bits``, the training-free front-end view (posthoc.py :func:`fit_views`) -> ``--out``;
   without it, c is copied to ``--out``.

The same functions as the four separate commands, with the same arguments, so the weights are the chain's; the final
config's ``reproduce.train`` is this one command and ``reproduce.steps`` the four it stands for.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Callable

DONE = "STEP_FINISHED"  # a step's checkpoint is complete only once this marker is written after it


def _step_args(args: argparse.Namespace, argv: list[str], **changes) -> argparse.Namespace:
    """``args`` for one step: the chain's own flags off, ``changes`` on, ``argv`` recorded as its command."""
    step = copy.copy(args)
    for name in ("speech_frontend", "speech_from", "speech_swap_into", "views_from"):
        setattr(step, name, None)
    for name, value in changes.items():
        setattr(step, name, value)
    step.argv = argv
    return step


def _shared_flags(args: argparse.Namespace) -> list[str]:
    """The flags every step was given in the separate commands (recorded in each step's command)."""
    flags = ["--data", str(args.data), "--work", str(args.work), "--seed", str(args.seed), "--threads", str(args.threads)]
    if args.without:
        flags += ["--without", args.without]
    return flags


def run_chain(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """``run`` is recipe.py's own (step b; passed in, as recipe.py imports this module)."""
    from app.training.general_audio.posthoc import command_of, fit_views, own_argv
    from app.training.general_audio.speech_swap import swap_speech, train_frontend_speech

    if not args.out:
        raise SystemExit("recall train general-audio: error: --out is required")
    data, work, out = Path(args.data).resolve(), Path(args.work), Path(args.out)
    name = args.name or out.name
    own = own_argv(args)
    shared = _shared_flags(args)

    head = train_frontend_speech(data, work, args)  # a: cached in W/speech-frontend once finished

    sounds_dir = work / "sounds-and-router"
    b_argv = [*shared, "--router-negatives", args.router_negatives, "--sounds-without-labels", args.sounds_without_labels,
              "--speech-from", str(head), "--out", str(sounds_dir), "--name", f"{name}-sounds-and-router",
              "--version", str(args.version)]
    if not (sounds_dir / DONE).is_file() or args.retrain:
        (sounds_dir / DONE).unlink(missing_ok=True)
        run(_step_args(args, b_argv, speech_from=str(head), out=str(sounds_dir), name=f"{name}-sounds-and-router",
                       description=""))
        (sounds_dir / DONE).write_text("sounds branch and router finished\n")

    swapped = work / "without-views" if args.frontend_bits else out
    base_version = f"{args.version}-without-views" if args.frontend_bits else str(args.version)
    c_argv = [*shared, "--speech-swap-into", str(sounds_dir), "--speech-from", str(head), "--out", str(swapped),
              "--name", name, "--version", base_version]
    c_changes = dict(speech_swap_into=str(sounds_dir), speech_from=str(head), out=str(swapped), name=name,
                     version=base_version)
    if args.frontend_bits:  # the final description goes on the final checkpoint
        c_changes["description"] = ""
    elif args.description:
        c_argv += ["--description", args.description]
    if not (swapped / DONE).is_file() or args.retrain or swapped == out:
        (swapped / DONE).unlink(missing_ok=True)
        swap_speech(_step_args(args, c_argv, **c_changes))
        if swapped != out:
            (swapped / DONE).write_text("speech swap finished\n")
    steps = [("speech head", head_command(head)), ("sounds branch and router", command_of(b_argv)),
             ("speech swap", command_of(c_argv))]

    if args.frontend_bits:
        d_argv = ["--data", str(args.data), "--views-from", str(swapped), "--frontend-bits", str(args.frontend_bits),
                  "--seed", str(args.seed), "--out", str(out), "--name", name, "--version", str(args.version)]
        if args.description:
            d_argv += ["--description", args.description]
        fit_views(data, _step_args(args, own, views_from=str(swapped), out=str(out), name=name))
        steps.append(("front-end view", command_of(d_argv)))
    record_steps(out, command_of(own), steps)
    if getattr(args, "head_seeds", 1) > 1:
        from app.training.general_audio.head_seeds import record_choice

        record_choice(work, out)
    print(f"one command: {len(steps)} steps -> {out}")
    return 0


def head_command(head: Path) -> str | None:
    """The speech head's own ``recall train audio`` command (its config records it)."""
    from app.encoders.checkpoint import read_config

    return read_config(head).get("training", {}).get("command")


def record_steps(out: Path, command: str, steps: list[tuple[str, str | None]]) -> None:
    """The final config's ``reproduce``: this one command, and beside it the separate steps it ran."""
    path = out / "config.json"
    config = json.loads(path.read_text())
    config["reproduce"] = {**config.get("reproduce", {}), "train": command,
                           "steps": [{"step": step, "train": train} for step, train in steps]}
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
