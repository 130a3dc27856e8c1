"""One client that alternates between servers request by request: a same-run A/B that the machine's drift cannot tip.

Why: on this shared 2-core VM one variant's one-client p50 moved 8.7-12.3 ms between rounds of the same run
(bench/results/text_query_ab_block.json), more than the changes measured. Rounds of a few hundred queries per
server put minutes between the variants compared; here every server answers the next request in turn, the
order reversing each pass (A B C, C B A, ...), so neighbouring requests see the same machine and each pass's
latencies are compared pair by pair: the median paired difference against the first server, with a
bootstrap interval (seeded), says whether a change is faster beyond the noise.

Every server gets its own list of requests (``requests[label]``); a text server must never see a sentence twice
(its query cache would answer). Giving every server the same list pairs each request with itself.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any, Sequence

import numpy as np

from bench.service.load import RawConnection, Req, percentiles

BOOTSTRAP_DRAWS = 2000


async def alternate(urls: dict[str, tuple[str, int]], requests: dict[str, Sequence[Req]], passes: int,
                    warmup: int = 10) -> dict[str, Any]:
    """``passes`` requests per server, servers taking turns request by request; per server its latencies and
    the server's own stage timings (p50), and per later server the paired comparison with the first."""
    labels = list(urls)
    conns = {label: RawConnection(*urls[label]) for label in labels}
    latencies: dict[str, list[float]] = {label: [] for label in labels}
    stages: dict[str, dict[str, list[float]]] = {label: {} for label in labels}
    try:
        for i in range(warmup + passes):
            for label in labels if i % 2 == 0 else labels[::-1]:
                req = requests[label][i]
                started = time.perf_counter()
                status, body = await conns[label].request(req)
                ms = (time.perf_counter() - started) * 1000
                if status != 200:
                    raise RuntimeError(f"{label}: HTTP {status}: {body[:300]!r}")
                if i < warmup:
                    continue
                latencies[label].append(ms)
                for key, value in json.loads(body).get("timings", {}).items():
                    stages[label].setdefault(key, []).append(value)
    finally:
        for conn in conns.values():
            await conn.close()
    out: dict[str, Any] = {"passes": passes, "order": "alternating, reversed every pass", "servers": {}}
    for label in labels:
        out["servers"][label] = {**percentiles(latencies[label]),
                                 "server_timings_p50_ms": {k: statistics.median(v) for k, v in stages[label].items()}}
    first = labels[0]
    out["paired_against"] = first
    out["paired"] = {label: paired(latencies[first], latencies[label]) for label in labels[1:]}
    return out


def paired(before: Sequence[float], after: Sequence[float], seed: int = 0) -> dict[str, float]:
    """Median of ``after[i] - before[i]`` (negative: ``after`` faster), its 95% bootstrap interval, and the
    share of pairs where ``after`` was faster."""
    diffs = np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)
    if diffs.size == 0:
        raise ValueError("no pairs to compare")
    rng = np.random.default_rng(seed)
    draws = np.median(diffs[rng.integers(0, diffs.size, (BOOTSTRAP_DRAWS, diffs.size))], axis=1)
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"median_diff_ms": float(np.median(diffs)), "ci95_low_ms": float(low), "ci95_high_ms": float(high),
            "faster_share": float(np.mean(diffs < 0)), "pairs": int(diffs.size)}
