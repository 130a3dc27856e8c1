"""``recall train general-audio --soup-seeds 0,1,2 --speech-init DIR ...``: version 5's whole chain in one command.

    recall train general-audio --data ../shared/data --speech-init app/assets/models/speech-attn-hash \\
        --speech-epochs 12 --soup-seeds 0,1,2 --whiten-eps 0.3 --mfcc-bits 64 --router-negatives varied \\
        --work .gl/general-audio-v5 --out app/assets/models/general-audio --name general-audio --version 5

runs, one after the other, the steps a person would otherwise type (each recorded as its own command
in the checkpoint it writes, so every intermediate can be rebuilt alone):

1. for each seed, the speech fine-tune twice, plain and with ``--speech-channel-augment``
   (``WORK/plain-s0``, ``WORK/channel-s0``, ...; each with a work folder of its own, so its synthetic
   speech is drawn with its seed); a stopped run resumes, finished fine-tunes are not trained again;
2. ``--speech-soup`` of all of them (``WORK/soup``);
3. ``--views-from`` with ``--whiten-eps`` / ``--mfcc-bits`` when either is given (``WORK/soup-views``);
4. ``--router-from`` with ``--router-negatives`` into ``--out``; its config's ``reproduce.recipe`` holds
   this one command.

Every other option (``--without``, ``--speech-epochs``, the synthesis sizes, ``--threads``...) is passed
to the fine-tunes as given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

# the recipe's own options: each step gets what it needs of them; everything else goes to the fine-tunes
RECIPE_VALUED = ("--soup-seeds", "--out", "--work", "--name", "--version", "--seed", "--whiten-eps", "--mfcc-bits",
                 "--router-negatives", "--description", "--router-clips")
RECIPE_FLAGS = ("--speech-channel-augment",)


def fine_tune_options(argv: list[str]) -> list[str]:
    """``argv`` without the recipe's own options (``--flag value`` and ``--flag=value`` forms)."""
    out, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in RECIPE_VALUED:
            skip = True
        elif word in RECIPE_FLAGS or word.split("=", 1)[0] in RECIPE_VALUED:
            continue
        else:
            out.append(word)
    return out


def recipe_steps(args: argparse.Namespace, argv: list[str]) -> list[list[str]]:
    """The chain's commands (arguments after ``recall train general-audio``), in order."""
    seeds = [s.strip() for s in args.soup_seeds.split(",") if s.strip()]
    if len(seeds) < 1 or not args.speech_init:
        raise SystemExit("--soup-seeds needs --speech-init and at least one seed (two fine-tunes per seed)")
    from app.training.general_audio.posthoc import given_steps

    taken = [flag for flag in given_steps(args) if flag != "--speech-init"]
    if taken:
        raise SystemExit(f"--soup-seeds runs the whole chain itself: drop {', '.join(taken)}")
    work, name, version = Path(args.work), args.name or Path(args.out).name, args.version
    shared = fine_tune_options(argv)
    data = ["--data", args.data]
    steps, bases = [], []
    for seed in seeds:
        for kind, extra in (("plain", []), ("channel", ["--speech-channel-augment"])):
            base = work / f"{kind}-s{seed}"
            steps.append([*shared, *extra, "--seed", seed, "--router-clips", str(args.router_clips),
                          "--work", str(work / f"{kind}-s{seed}-work"), "--out", str(base),
                          "--name", name, "--version", f"{version}-{kind}-s{seed}"])
            bases.append(str(base))
    tail = ["--name", name, "--version", version]
    source = work / "soup"
    steps.append([*data, "--speech-soup", ",".join(bases), "--out", str(source), *tail])
    if args.whiten_eps is not None or args.mfcc_bits:
        views = work / "soup-views"
        steps.append([*data, "--views-from", str(source),
                      *(["--whiten-eps", str(args.whiten_eps)] if args.whiten_eps is not None else []),
                      *(["--mfcc-bits", str(args.mfcc_bits)] if args.mfcc_bits else []), "--out", str(views), *tail])
        source = views
    steps.append([*data, "--work", str(work / f"plain-s{seeds[0]}-work"), "--router-from", str(source),
                  "--router-negatives", args.router_negatives, "--router-clips", str(args.router_clips),
                  "--out", str(args.out), *tail, *(["--description", args.description] if args.description else [])])
    return steps


def run_recipe(args: argparse.Namespace, own: list[str], parse, run) -> int:
    """Run every step (``parse``: argv -> Namespace, ``run``: the general-audio command); the last one records
    ``own`` (this command's arguments) as its recipe."""
    steps = recipe_steps(args, own)
    recipe = "recall train general-audio " + " ".join(own)
    for i, step in enumerate(steps, 1):
        print(f"[{i}/{len(steps)}] recall train general-audio {' '.join(step)}", flush=True)
        step_args = parse(step)
        step_args.argv = step
        if i == len(steps):
            step_args.recipe = recipe
        if run(step_args) != 0:
            raise SystemExit(f"step {i} of the recipe failed")
    return 0
