"""`recall keys create|list|revoke`: scoped API keys, stored hashed in the key file.

The file is the service's ``keys_file`` setting (default ``<data_dir>/keys.json``); a running
service re-reads it when it changes, so a new key works and a revoked one stops at once.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    keys = subparsers.add_parser("keys", help="create, list and revoke scoped API keys (stored hashed)")
    actions = keys.add_subparsers(dest="keys_command", required=True)

    create = actions.add_parser("create", help="make a key, print it once, store only its hash")
    create.add_argument("--scopes", default="read,write",
                        help="comma-separated: read (search, list, get), write (ingest, delete), admin (collections); "
                        "default read,write")
    create.add_argument("--name", default="", help="a label for `recall keys list`, e.g. who holds the key")
    _file_args(create)
    create.set_defaults(func=create_command)

    listing = actions.add_parser("list", help="the keys' ids, names and scopes (never the keys)")
    listing.add_argument("--json", action="store_true")
    _file_args(listing)
    listing.set_defaults(func=list_command)

    revoke = actions.add_parser("revoke", help="remove a key by its id; it stops working at once")
    revoke.add_argument("id", help="the key's id (the 8 characters after 'rk_')")
    _file_args(revoke)
    revoke.set_defaults(func=revoke_command)


def _file_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--keys-file", help="the key file (RECALL_KEYS_FILE; default <data dir>/keys.json)")
    parser.add_argument("--data-dir", help="the service's data directory (RECALL_DATA_DIR, default ./data)")


def _key_file(args: argparse.Namespace):
    from app.settings import Settings
    from app.usecases.keys import KeyFile

    overrides = {k: v for k, v in {"keys_file": args.keys_file, "data_dir": args.data_dir}.items() if v is not None}
    return KeyFile(Path(Settings(**overrides).resolved_keys_file()))


def create_command(args: argparse.Namespace) -> int:
    try:
        key, record = _key_file(args).create(args.scopes, args.name)
    except ValueError as exc:
        print(f"recall keys: {exc}", file=sys.stderr)
        return 2
    # the key on stdout alone, so `KEY=$(recall keys create)` works; the rest is for the person
    print(key)
    print(f"id {record.id}, scopes {','.join(sorted(record.scopes))}: shown once, only its hash is stored",
          file=sys.stderr)
    return 0


def list_command(args: argparse.Namespace) -> int:
    records = sorted(_key_file(args).records().values(), key=lambda r: r.created_at)
    if args.json:
        print(json.dumps([r.public() for r in records], indent=2))
        return 0
    for r in records:
        created = time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.created_at))
        print(f"{r.id}  {','.join(sorted(r.scopes)):<16} {created} UTC  {r.name}")
    return 0


def revoke_command(args: argparse.Namespace) -> int:
    if not _key_file(args).revoke(args.id):
        print(f"recall keys: no key with id {args.id!r}", file=sys.stderr)
        return 1
    print(f"revoked {args.id}", file=sys.stderr)
    return 0
