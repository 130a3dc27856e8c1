"""`recall reembed SOURCE TARGET`: copy a collection into a new one embedded by today's default checkpoint.

A collection keeps the checkpoint version that built it (``encoder_version``), so upgrading the
service never mixes codes of two checkpoints in one index. To move a collection to a newer
checkpoint, this command creates ``TARGET`` with the same modality, window, hop, index kinds and index setting
(and the encoder named by ``--encoder``, else the service's default), then re-ingests every item
of ``SOURCE`` from its stored original, with the same id and metadata. It talks to a running
service over HTTP, so the service keeps answering from ``SOURCE`` meanwhile; delete ``SOURCE``
when ``TARGET`` is complete. Re-running it resumes: items already in ``TARGET`` are skipped.
Items stored without their media (``keep_media: false``) cannot be re-embedded and are listed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app import errors

COPIED_OPTIONS = ("window_s", "hop_s", "index_kinds", "description")
FIRST_BATCH = 256  # files in the first ingest request (a job on the service's side when over its sync limit)
BATCH = 16  # files per later request
BATCH_BYTES = 32 * 1024 * 1024  # below the service's default request limit (50 MB)


def reembed(client: Any, source: str, target: str, encoder: str | None = None, page_size: int = 100) -> dict[str, Any]:
    """Copy ``source`` into ``target``; returns counts and the ids that had no stored media."""
    info = client.get_collection(source)
    options = {key: info[key] for key in COPIED_OPTIONS if info.get(key) is not None}
    options["keep_media"] = True
    setting = (info.get("index") or {}).get("setting")
    if setting:  # the index kind, IVF shape and float storage as created (a service before 2026-11-27 does not say)
        options["index"] = setting
    if encoder:
        options["encoder"] = encoder
    try:
        client.create_collection(target, info["modality"], **options)
        present: set[str] = set()
    except errors.Conflict:  # resuming: keep what an earlier run copied
        present = {item["id"] for item in _all_items(client, target, page_size)}
    copied, skipped, without_media, failed = 0, 0, [], []
    batch: list[dict[str, Any]] = []

    def send() -> None:
        nonlocal copied
        report = client.ingest(target, [(i["filename"] or i["id"], i["data"]) for i in batch], ids=[i["id"] for i in batch],
                               metadata=[i["metadata"] for i in batch])
        failed.extend(e["id"] for e in report["errors"])
        copied += len(batch) - len(report["errors"])
        batch.clear()

    for item in _all_items(client, source, page_size):
        if item["id"] in present:
            skipped += 1
        elif not item["has_media"]:
            without_media.append(item["id"])
        else:
            data = client.get_media(source, item["id"])
            # the first request is the large one: a foreign (ONNX) encoder fits the new collection's binary
            # codes on its vectors (app/usecases/posthoc_codes.py); later ones are modest batches
            limit = FIRST_BATCH if copied == 0 and not present else BATCH
            if batch and (len(batch) >= limit or sum(len(i["data"]) for i in batch) + len(data) > BATCH_BYTES):
                send()
            batch.append({**item, "data": data})
    if batch:
        send()
    return {"source": source, "target": target, "copied": copied, "already_there": skipped, "without_media": without_media,
            "failed": failed}


def _all_items(client: Any, collection: str, page_size: int) -> list[dict[str, Any]]:
    items, offset = [], 0
    while True:
        page = client.list_items(collection, limit=page_size, offset=offset)
        items += page["data"]
        offset += len(page["data"])
        if not page["data"] or offset >= page["count"]:
            return items


def reembed_command(args: argparse.Namespace) -> int:
    from recall import RecallClient

    with RecallClient(args.url, api_key=args.api_key) as client:
        report = reembed(client, args.source, args.target, args.encoder)
    print(f"{report['copied']} items re-embedded into {args.target} ({report['already_there']} were already there)")
    for item_id in report["failed"]:
        print(f"not copied: {item_id}", file=sys.stderr)
    if report["without_media"]:
        print(f"{len(report['without_media'])} items have no stored media and were not copied: "
              f"{', '.join(report['without_media'][:20])}", file=sys.stderr)
        return 1
    return 1 if report["failed"] else 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("reembed", help="copy a collection into a new one embedded by the current checkpoint")
    p.add_argument("source", help="the collection to copy (left as it is)")
    p.add_argument("target", help="the new collection")
    p.add_argument("--encoder", help="encoder of the new collection (default: the service's default for the modality)")
    p.add_argument("--url", help="service URL (RECALL_URL, default http://localhost:8000)")
    p.add_argument("--api-key", help="API key (RECALL_API_KEY)")
    p.set_defaults(func=reembed_command)
