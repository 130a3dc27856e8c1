"""`recall encoders check DIR`: validate a bring-your-own encoder folder and print what it holds.

It runs the same load the service runs (manifest, every file's sha256, onnxruntime with no custom
ops, a probe batch), on this machine and without a service, so a folder can be checked before it
is copied under ``RECALL_ENCODERS__ONNX_DIR``. Exit status 0 when usable, 1 with one message when not.
"""

from __future__ import annotations

import argparse
import json
import sys


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    encoders = subparsers.add_parser("encoders", help="bring-your-own ONNX encoder folders")
    actions = encoders.add_subparsers(dest="encoders_command", required=True)
    check = actions.add_parser("check", help="validate an encoder folder (manifest, checksums, model inputs and outputs)")
    check.add_argument("folder", help="a folder with manifest.json and its ONNX files")
    check.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="run the probe on this device (default cpu)")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=check_command)


def check_command(args: argparse.Namespace) -> int:
    from app.encoders.onnx_folder.check import check_folder
    from app.encoders.onnx_folder.manifest import FolderError
    from app.encoders.registry import load_checkpoint_dir

    try:
        report = check_folder(args.folder, args.device, load_checkpoint_dir)
    except FolderError as exc:
        if args.json:
            print(json.dumps({"ok": False, "problem": exc.kind, "message": exc.message}))
        else:
            print(f"recall encoders check: {exc.message} [{exc.kind}]", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{report['name']}: usable ({report['family']}, {report['modality']}, version {report['version']})")
    for key, value in report.items():
        if key not in ("ok", "name", "family", "modality", "version"):
            print(f"  {key}: {value}")
    return 0
