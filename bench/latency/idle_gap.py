"""What a short idle spell between queries costs a text query on this machine, in process (no HTTP).

    python -m bench.latency.idle_gap [--images 10000] [--queries 400] [--gaps-ms 0,2,5]

Why: a text query's server stages (encode, search, re-rank) took ~40% longer under a one-client HTTP load
than the same code run back to back in process, with the same code and data. A one-client load leaves the
server idle between requests (the client reads the answer and sends the next), and on this VM a core that
idles even briefly comes back slower (its caches refilled by whatever ran meanwhile, the host's scheduling):
this bench measures that alone. ``Services`` on a copy of a ``bench.service.query_corpus`` collection of
``--images`` images, ``run_search`` for new sentences (``{"text", "k": 10}``, re-ranked) on uvloop, as
the server runs them; before each query the loop sleeps for one of ``--gaps-ms``, the same gap for a block of
``--block`` queries, the gaps taking turns block by block (so every gap sees the same drift), the first
queries of each block not counted. Blocks, not query by query: the cost is not (only) the spell just before
a query. With the gaps alternating query by query (0, 2, 5, 0, ...) every query took about as long as after
5 ms: a core that keeps idling now and then runs slower overall, whatever the last spell was. Per gap: the p50
of the whole search and of each stage the service times. Writes ``bench/results/idle_gap.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.output import write_results
from bench.service import query_corpus as corpus
from bench.service.query_path import RESULTS, _load, _texts

OUT = RESULTS / "idle_gap.json"
WARMUP = 10


def schedule(n: int, gaps: list[float], block: int) -> list[tuple[float, bool]]:
    """(gap before query i, whether it is counted) for ``n`` queries: the gaps take turns block by block, and the
    first ``WARMUP`` queries of each block, which still run in the previous block's state, are not counted."""
    if block <= WARMUP:
        raise ValueError(f"a block must be longer than its {WARMUP} uncounted queries, got {block}")
    return [(gaps[(i // block) % len(gaps)], i % block >= WARMUP) for i in range(n)]


async def _measure(data_dir: Path, texts: list[str], gaps_s: list[float], block: int) -> dict[str, Any]:
    os.environ["RECALL_DATA_DIR"] = str(data_dir)
    os.environ["RECALL_DEMO"] = "0"
    from app.api.schemas import SearchRequest
    from app.settings import Settings
    from app.usecases.query import run_search
    from app.usecases.services import Services

    services = Services(Settings())
    await services.start()
    rows: dict[float, dict[str, list[float]]] = {gap: {} for gap in gaps_s}
    try:
        for text, (gap, counted) in zip(texts, schedule(len(texts), gaps_s, block)):
            if gap:
                await asyncio.sleep(gap)
            started = time.perf_counter()
            answer = await run_search(services, corpus.IMAGE_COLLECTION, SearchRequest(text=text, k=10), None)
            if not counted:
                continue
            row = rows[gap]
            row.setdefault("search_ms", []).append((time.perf_counter() - started) * 1000)
            for key, value in answer["timings"].items():
                row.setdefault(f"server_{key}", []).append(value)
    finally:
        await services.stop()
    return {f"{gap * 1000:g}": {"n": len(row["search_ms"]), **{k: statistics.median(v) for k, v in row.items()}}
            for gap, row in rows.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=400, help="measured queries per gap")
    parser.add_argument("--gaps-ms", default="0,2,5", help="idle milliseconds before a query, block by block in turn")
    parser.add_argument("--block", type=int, default=60, help="queries per block (the first 10 not counted)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import uvloop

    from app.settings import Settings

    gaps = [float(g) / 1000 for g in args.gaps_ms.split(",")]
    blocks = max(1, -(-args.queries // (args.block - WARMUP)))  # per gap
    texts = _texts(len(gaps) * blocks * args.block)  # every sentence new: the query cache never answers
    encoders = Settings().encoders
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "images": args.images,
                              "load_before": _load()}
    with tempfile.TemporaryDirectory(prefix="recall-idlegap-") as tmp:
        data = Path(tmp) / "data"
        result["corpus"] = corpus.prepared(args.cache, encoders.default_audio, encoders.default_image, 1000, args.images, data)
        result["block"] = args.block
        result["by_gap_ms"] = uvloop.run(_measure(data, texts, gaps, args.block))
    result["load_after"] = _load()
    write_results(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
