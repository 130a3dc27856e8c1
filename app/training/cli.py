"""`recall train <what>`: each trainable family registers its own subcommand."""

from __future__ import annotations

import argparse
import importlib

_TRAINERS = ("app.training.audio.cli", "app.training.general_audio.recipe", "app.training.image_text.cli")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    train = subparsers.add_parser("train", help="train an encoder and write a checkpoint directory")
    kinds = train.add_subparsers(dest="what", required=True)
    for module_name in _TRAINERS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        module.add_parser(kinds)
