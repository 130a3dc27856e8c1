"""`recall` command line: serve, ingest, search, train, eval.

Subcommands that live with their feature (training, evaluation) register themselves through an
``add_parser(subparsers)`` function in their own module, imported only when needed so that
`recall serve` does not pay for matplotlib or training code.
"""

from __future__ import annotations

import argparse
import importlib

# subcommand -> module with add_parser(subparsers) that sets `func` on its parsers
_FEATURE_COMMANDS = {
    "train": "app.training.cli",
    "eval": "app.eval.cli",
    "reembed": "app.cli.reembed",
    "backup": "app.cli.backup",  # and restore
    "keys": "app.cli.keys",  # create, list, revoke
    "encoders": "app.cli.encoders",  # check an ONNX encoder folder
}
_CORE_COMMANDS = "app.cli.core"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="recall", description="Recall retrieval service and tools")
    subparsers = parser.add_subparsers(dest="command", required=True)
    importlib.import_module(_CORE_COMMANDS).add_parser(subparsers)
    for module_name in _FEATURE_COMMANDS.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # feature not installed in this build
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = args.func(args)
    return int(result or 0)

