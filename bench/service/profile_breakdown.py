"""Where a query's time goes, from py-spy's collapsed stacks (``py-spy record --format raw``).

Each sample is attributed to the first category whose pattern matches a frame, walking from the
innermost frame outwards, so time inside the model counts as model time even when an HTTP
handler is further up the stack. Samples of threads waiting (an idle event loop in ``select``,
an idle pool thread, a lock or condition wait) are counted apart: they are not work.

The result is thread time per query in milliseconds. Threads overlap (the model runs on its own
thread while the event loop parses the next request), so the categories add up to more than a
query's wall latency; the wall-clock split is in the server's own ``timings``.

    python -m bench.service.profile_breakdown bench/results/query_path_profile_wav.txt --queries 400
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

# (category, frame pattern); the first category matching the innermost frame wins
WAITING = [
    # an idle event loop (asyncio's select, or uvloop's native loop under Runner.run), idle pool
    # threads, and threads blocked on a condition, queue or lock
    ("waiting", re.compile(r"(^|\.)(select|poll|_worker|wait|get|_wait_for_tstate_lock|run|run_forever|_run_once) "
                           r"\((selectors|concurrent/futures/thread|threading|queue|asyncio/base_events|asyncio/runners)\.py")),
]
CATEGORIES = [
    ("model forward (torch)", re.compile(r"\((app/encoders/|torch/|transformers/|sentence_transformers/)")),
    ("features (spectrogram)", re.compile(r"\(app/features/")),
    ("decode (WAV parse, libsndfile, ffmpeg, resample)", re.compile(r"\((app/media/|soundfile\.py|soxr/|av/)")),
    ("index scan (numba kernels, FAISS)", re.compile(r"\((app/index/|faiss/)")),
    ("catalog reads (SQLite)", re.compile(r"\((app/storage/|sqlite3/)")),
    ("ranking (grouping, occurrences, re-rank)", re.compile(r"\(app/search/")),
    ("batching and thread hand-offs", re.compile(r"\((app/worker/|concurrent/futures/|threading\.py|queue\.py|asyncio/(threads|futures|base_events|events)\.py)")),
    ("multipart and body parsing", re.compile(r"\((multipart/|python_multipart/|starlette/formparsers|app/api/uploads)")),
    ("HTTP server and framework", re.compile(r"\((uvicorn/|starlette/|fastapi/|h11/|httptools/|pydantic|app/middleware|app/api/|app/main|anyio/)")),
    ("query assembly (app/usecases/query.py)", re.compile(r"\((app/querying|app/usecases/query)\.py")),
]


def breakdown(raw: Path, queries: int, rate_hz: float) -> dict[str, object]:
    """Thread milliseconds per query by category."""
    counts: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")[1:]]  # drop the process/thread root
        counts[_category(frames)] += int(n)
    per_query = {k: v * 1000.0 / rate_hz / max(1, queries) for k, v in counts.most_common()}
    busy = {k: v for k, v in per_query.items() if k != "waiting"}
    return {"thread_ms_per_query": busy, "waiting_ms_per_query": per_query.get("waiting", 0.0),
            "busy_total_ms_per_query": sum(busy.values()), "samples": sum(counts.values()), "queries": queries,
            "rate_hz": rate_hz}


def _category(frames: list[str]) -> str:
    leaf = frames[-1] if frames else ""
    for name, pattern in WAITING:
        if pattern.search(leaf):
            return name
    for frame in reversed(frames):
        for name, pattern in CATEGORIES:
            if pattern.search(frame):
                return name
    return "other"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw", type=Path)
    parser.add_argument("--queries", type=int, required=True)
    parser.add_argument("--rate", type=float, default=250.0)
    args = parser.parse_args(argv)
    print(json.dumps(breakdown(args.raw, args.queries, args.rate), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
