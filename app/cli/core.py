"""`recall serve`, `recall ingest`, `recall search`: the service and its everyday client commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

AUDIO_EXT = {".wav", ".flac", ".ogg", ".opus", ".mp3", ".m4a", ".webm", ".mp4", ".aac"}
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".webp", ".gif"}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("serve", help="run the HTTP service (settings from RECALL_* variables)")
    serve.add_argument("--host", help="interface to bind (RECALL_HOST, default 0.0.0.0)")
    serve.add_argument("--port", type=int, help="port (RECALL_PORT, default 8000)")
    serve.add_argument("--data-dir", help="catalog, media and index snapshots (RECALL_DATA_DIR, default ./data)")
    serve.set_defaults(func=serve_command)

    ingest = subparsers.add_parser("ingest", help="upload files or a folder to a collection (resumable)")
    ingest.add_argument("path", help="a file or a folder (searched recursively)")
    ingest.add_argument("--collection", required=True)
    ingest.add_argument("--modality", choices=["audio", "image"], help="create the collection if missing, with this modality")
    ingest.add_argument("--encoder", help="encoder for a newly created collection")
    ingest.add_argument("--batch", type=int, default=8, help="files per request")
    ingest.add_argument("--state", help="progress file for resuming (default: .recall-ingest-<collection>.json in the folder)")
    _client_args(ingest)
    ingest.set_defaults(func=ingest_command)

    search = subparsers.add_parser("search", help="search a collection with an example file or a text")
    search.add_argument("query", help="a file path, or text with --text")
    search.add_argument("--collection", required=True)
    search.add_argument("--text", action="store_true", help="treat QUERY as a sentence (image collections)")
    search.add_argument("-k", type=int, default=10)
    search.add_argument("--mode", choices=["binary", "float", "two_stage"], default="two_stage")
    search.add_argument("--item-distance", choices=["mean", "min"], default=None,
                        help="how an audio item combines a multi-window query's windows (the service's default: mean)")
    search.add_argument("--json", action="store_true", help="print the raw JSON response")
    _client_args(search)
    search.set_defaults(func=search_command)


def _client_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="service URL (RECALL_URL, default http://localhost:8000)")
    parser.add_argument("--api-key", help="API key (RECALL_API_KEY)")


def serve_command(args: argparse.Namespace) -> int:
    import uvicorn

    from app.main import create_app
    from app.settings import Settings

    overrides = {k: v for k, v in {"host": args.host, "port": args.port, "data_dir": args.data_dir}.items() if v is not None}
    # listen at once and load in the background: orchestrators see /healthz alive and /readyz 503 meanwhile
    settings = Settings(**{"background_start": True, **overrides})
    if settings.ray_address:
        from app.cluster.ray_connect import RayHeadUnavailable
        from app.cluster.ray_runtime import ensure_ray

        # join Ray before listening: a head that cannot be reached or refuses the token stops the
        # start here with the setting to fix, instead of every request answering 500
        try:
            ensure_ray(settings.ray_address, settings.cluster)
        except RayHeadUnavailable as exc:
            print(f"recall serve: {exc}", file=sys.stderr)
            return 2
    # one worker: the model, the batch queues and the index live in this process
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level, workers=1)
    return 0


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise SystemExit(f"{root}: no such file or folder")
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in AUDIO_EXT | IMAGE_EXT)


def ingest_command(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from recall import RecallClient
    from app.errors import NotFound, ServiceError

    root = Path(args.path)
    files = _files(root)
    state_path = Path(args.state) if args.state else (root if root.is_dir() else root.parent) / f".recall-ingest-{args.collection}.json"
    done: set[str] = set(json.loads(state_path.read_text())["done"]) if state_path.is_file() else set()
    base = root if root.is_dir() else root.parent
    todo = [p for p in files if str(p.relative_to(base)) not in done]
    failed: list[dict] = []
    with RecallClient(args.url, args.api_key) as client:
        try:
            client.get_collection(args.collection)
        except NotFound:
            if not args.modality:
                raise SystemExit(f"collection {args.collection!r} does not exist; pass --modality to create it")
            options = {"encoder": args.encoder} if args.encoder else {}
            client.create_collection(args.collection, args.modality, **options)
        with tqdm(total=len(files), initial=len(files) - len(todo), unit="file", desc=args.collection) as bar:
            for start in range(0, len(todo), args.batch):
                chunk = todo[start : start + args.batch]
                ids = [str(p.relative_to(base)) for p in chunk]
                try:
                    report = client.ingest(args.collection, chunk, ids=ids)
                    bad = {e["id"] for e in report["errors"]}
                    failed += report["errors"]
                except ServiceError as exc:
                    bad = set(ids)
                    failed += [{"id": i, "error": {"message": exc.message}} for i in ids]
                done.update(i for i in ids if i not in bad)
                state_path.write_text(json.dumps({"done": sorted(done)}))  # resume point after every batch
                bar.update(len(chunk))
    for row in failed:
        print(f"failed: {row['id']}: {row['error']['message']}", file=sys.stderr)
    print(f"{len(done)} of {len(files)} files indexed in {args.collection!r}")
    return 1 if failed else 0


def search_command(args: argparse.Namespace) -> int:
    from recall import RecallClient

    with RecallClient(args.url, args.api_key) as client:
        if args.text:
            response = client.search_text(args.collection, args.query, k=args.k, mode=args.mode)
        else:
            extra = {"item_distance": args.item_distance} if args.item_distance else {}
            response = client.search_file(args.collection, args.query, k=args.k, mode=args.mode, **extra)
    if args.json:
        print(json.dumps(response, indent=2))
        return 0
    for row in response["results"]:
        where = ", ".join(f"{s['start']:.2f}-{s['end']:.2f}s" for s in row["segments"] if s["end"] > 0)
        print(f"{row['rank']:>3}  {row['score']:.4f}  {row['id']}  {where}")
    timings = ", ".join(f"{k} {v:.1f}" for k, v in response["timings"].items())
    print(f"({timings})")
    return 0
