"""`recall backup DEST` and `recall restore SRC DATA_DIR`: a consistent copy of a data directory, and back.

The work is in app/storage/backup.py; this module parses arguments, picks the data directory the
service uses (RECALL_DATA_DIR), refuses cluster mode (PostgreSQL has pg_dump), and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

CLUSTER_REFUSAL = (
    "RECALL_CATALOG_URL is set: the catalog is PostgreSQL, which `recall backup` does not copy. Back it up with "
    "PostgreSQL's own tools (pg_dump -Fc \"$RECALL_CATALOG_URL\" > catalog.dump, restored with pg_restore), then "
    "copy the shared media directory (RECALL_DATA_DIR/media) after the dump; index snapshots are not needed "
    "(cluster mode rebuilds its indices from the catalog). See README, 'Backup and restore'."
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    backup = subparsers.add_parser(
        "backup", help="write a consistent copy of the data directory (the service may keep running and writing)")
    backup.add_argument("dest", help="a new (or empty) folder for the backup")
    backup.add_argument("--data-dir", help="the data directory to copy (RECALL_DATA_DIR, default ./data)")
    backup.set_defaults(func=backup_command)

    restore = subparsers.add_parser("restore", help="check a backup and make it a new data directory")
    restore.add_argument("src", help="a folder written by `recall backup`")
    restore.add_argument("data_dir", help="the new data directory (absent or empty); start the service on it")
    restore.set_defaults(func=restore_command)


def backup_command(args: argparse.Namespace) -> int:
    from app.settings import Settings
    from app.storage.backup import BackupError, backup

    settings = Settings(**({"data_dir": args.data_dir} if args.data_dir else {}))
    if settings.catalog_url:
        print(CLUSTER_REFUSAL, file=sys.stderr)
        return 2
    try:
        summary = backup(Path(settings.data_dir), Path(args.dest))
    except (BackupError, OSError) as exc:  # OSError: e.g. the destination's disk is full; nothing is left behind
        print(f"recall backup: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=1))
    return 0


def restore_command(args: argparse.Namespace) -> int:
    from app.storage.backup import BackupError, restore

    try:
        summary = restore(Path(args.src), Path(args.data_dir))
    except (BackupError, OSError) as exc:
        print(f"recall restore: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(summary, indent=1))
    return 0
