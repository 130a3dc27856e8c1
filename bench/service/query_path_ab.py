"""Interleaved A/B of the query path: server variants take turns, several rounds, medians per variant.

Why: on the shared 2-core machine two identical runs of ``bench.service.query_path`` differed by up to 25% in
q/s at 16 clients (the host's other tenants come and go), more than most code changes move it. Taking
turns (before, after, before, after...) spreads that drift over every variant, and the median over
rounds is what the report compares.

Each variant is a source tree (a git revision, exported like ``bench.service.query_path --baseline``, or a
directory) served by ``recall serve`` on a copy of one cached corpus; each round measures 1, 4 and 16
closed-loop clients sending 1-second WAV queries for ``--seconds`` each, and with ``--text`` one client
of text-to-image queries (re-rank R = 100; every server starts with an empty text cache, and no
sentence repeats within a round).

    python -m bench.service.query_path_ab --variant before=dbf9c42:plain --variant after=. --rounds 3 \\
        --audio-encoder general-audio@2

``NAME=REV_OR_DIR[:plain]``: ``plain`` serves that variant with asyncio + h11 (what a revision from
before uvloop/httptools were dependencies got). Writes ``bench/results/query_path_ab.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.service import query_corpus as corpus
from bench.service.query_path import RESULTS, ROOT, Server, _export_tree, _load, _phase_requests, _query_files, _texts, measured
from bench.service.load import json_request, run_load

CONCURRENCY = (1, 4, 16)
KEYS = ("p50_ms", "p99_ms", "queries_per_s", "server_cpu_ms_per_query", "machine_busy_fraction")


def parse_variant(text: str) -> tuple[str, str, bool]:
    """'after=.' -> ('after', '.', False); 'before=dbf9c42:plain' -> ('before', 'dbf9c42', True)."""
    name, _, source = text.partition("=")
    if not name or not source:
        raise argparse.ArgumentTypeError(f"expected NAME=REV_OR_DIR[:plain], got {text!r}")
    plain = source.endswith(":plain")
    return name, source[: -len(":plain")] if plain else source, plain


TEXT = "text_R100"  # the phase name of --text's one-client text queries


def medians(rounds: list[dict[str, Any]], variant: str) -> dict[str, dict[str, float]]:
    """Per phase (each concurrency, and the text phase where measured), the median of each measure
    over the rounds of one variant."""
    rows = [r for r in rounds if r["variant"] == variant]
    phases = [str(c) for c in CONCURRENCY] + ([TEXT] if rows and all(TEXT in r for r in rows) else [])
    return {phase: {k: statistics.median(r[phase][k] for r in rows) for k in KEYS} for phase in phases}


async def _one_round(server: Server, requests: list, seconds: float, texts: list) -> dict[str, Any]:
    await run_load(server.url, requests, 1, 30, 30, kind="raw")  # warm-up
    out = {}
    for c in CONCURRENCY:
        row = await measured(server, requests, c, 1_000_000, seconds)  # bounded by time, not count
        out[str(c)] = {k: row[k] for k in KEYS}
    if texts:
        await run_load(server.url, texts[:10], 1, 10, 30, kind="raw")  # loads MiniLM; these sentences are not measured
        row = await measured(server, texts[10:], 1, len(texts) - 10, seconds)
        out[TEXT] = {k: row[k] for k in KEYS}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", type=parse_variant, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="per concurrency level and round")
    parser.add_argument("--audio-encoder", help="registry key of the corpus's audio encoder (default: the service's)")
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=100_000, help="images in the cached corpus (searched with --text)")
    parser.add_argument("--text", action="store_true", help="also one client of text-to-image queries, re-rank R = 100")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--out", type=Path, default=RESULTS / "query_path_ab.json")
    args = parser.parse_args(argv)

    from app.settings import Settings

    encoders = Settings().encoders
    audio_encoder = args.audio_encoder or encoders.default_audio
    requests = _phase_requests(corpus.AUDIO_COLLECTION, _query_files())["wav16k"]
    text_path = f"/v1/collections/{corpus.IMAGE_COLLECTION}/search"
    texts = [json_request(text_path, {"text": t, "k": 10, "rerank": True, "rerank_top": 100})
             for t in _texts(400)] if args.text else []
    result: dict[str, Any] = {"audio_encoder": audio_encoder, "windows": args.windows, "load_before": _load(),
                              "variants": {}, "rounds": []}
    with tempfile.TemporaryDirectory(prefix="recall-qpab-") as tmp:
        trees = {}
        for name, source, plain in args.variant:
            if Path(source).is_dir():
                trees[name] = (Path(source).resolve(), plain)
                result["variants"][name] = {"source": str(Path(source).resolve()), "plain_stack": plain}
            else:
                (Path(tmp) / name).mkdir()
                sha = _export_tree(source, Path(tmp) / name)
                trees[name] = (Path(tmp) / name, plain)
                result["variants"][name] = {"source": sha, "plain_stack": plain}
        seed = Path(tmp) / "corpus"
        result["corpus"] = corpus.prepared(args.cache, audio_encoder, encoders.default_image, args.windows, args.images, seed)
        for round_number in range(args.rounds):
            for name, (tree, plain) in trees.items():
                data = Path(tmp) / f"data-{name}"
                shutil.rmtree(data, ignore_errors=True)
                shutil.copytree(seed, data)
                server = Server(tree, data, name, plain_stack=plain)
                server.start()
                try:
                    row = asyncio.run(_one_round(server, requests, args.seconds, texts))
                finally:
                    server.stop()
                result["rounds"].append({"round": round_number, "variant": name, "at": time.time(), **row})
                print(round_number, name, " | ".join(
                    f"{c}: p50 {v['p50_ms']:.1f} ms, {v['queries_per_s']:.1f} q/s" for c, v in row.items()), flush=True)
    result["medians"] = {name: medians(result["rounds"], name) for name in trees}
    result["head"] = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
