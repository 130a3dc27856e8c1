"""What the cluster-wide rate limit costs per request: the catalog's shared bucket against the per-process one.

Same run, same app, same PostgreSQL catalog (a throwaway server with fsync on, as deployed:
tests/cluster/pg_server.py); only the limiter differs, swapped between rounds that alternate so
that drift on the shared machine falls on both arms alike:

* ``take``: the limiter alone, one ``take_async`` after another (the shared one is one UPSERT round
  trip to PostgreSQL on its own connection, app/storage/rate_counters.py);
* ``request``: a whole ``GET /v1/collections`` through the app (FastAPI's TestClient), the cheapest
  guarded route, so the limiter's share of a request is as large as it gets;
* ``concurrent``: 16 takes in flight at once from one process: the shared limiter has
  CONNECTIONS (4) statements in flight at most, so this is its ceiling in takes per second per
  process on this machine.

Every take is allowed (rate and burst far above what is sent): a refusal costs the same statement.

    flock /tmp/recall-timing.lock python -m bench.reliability.shared_limits
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from fastapi.testclient import TestClient

from app.api.rate_limit import CONNECTIONS, RateLimiter, SharedRateLimiter
from app.main import create_app
from app.settings import Settings
from app.storage.rate_counters import RateCounters
from bench.output import write_results

RATE, BURST = 1e9, 10**9  # nothing is refused: the allowed path is what every request pays


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"n": len(ordered), "p50_us": round(pick(0.50) * 1e6, 1), "p99_us": round(pick(0.99) * 1e6, 1),
            "mean_us": round(statistics.fmean(ordered) * 1e6, 1)}


def _alternate(arms: dict[str, Callable[[], list[float]]], rounds: int) -> dict[str, list[list[float]]]:
    """Each arm's timings per round; the arms take turns, in alternating order."""
    timings: dict[str, list[list[float]]] = {name: [] for name in arms}
    for r in range(rounds):
        for name in (list(arms) if r % 2 == 0 else list(reversed(arms))):
            timings[name].append(arms[name]())
    return timings


def _flat(per_round: list[list[float]]) -> list[float]:
    return [t for one in per_round for t in one]


def _paired_p50_difference_us(timings: dict[str, list[list[float]]]) -> dict[str, float]:
    """Shared minus local, p50 of each round against the other arm's in the same round: the median
    and the spread of those differences (a busy machine moves both arms; the pairing cancels most of it)."""
    diffs = sorted((statistics.median(s) - statistics.median(l)) * 1e6 for s, l in zip(timings["shared"], timings["local"]))
    return {"median": round(statistics.median(diffs), 1), "q25": round(diffs[len(diffs) // 4], 1),
            "q75": round(diffs[3 * len(diffs) // 4], 1), "rounds": len(diffs)}


def _takes(limiter: Any, loop: asyncio.AbstractEventLoop, n: int) -> Callable[[], list[float]]:
    async def run() -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            await limiter.take_async("addr:bench")
            out.append(time.perf_counter() - start)
        return out

    return lambda: loop.run_until_complete(run())


def _concurrent(limiter: Any, loop: asyncio.AbstractEventLoop, n: int, width: int = 16) -> Callable[[], list[float]]:
    async def run() -> list[float]:
        start = time.perf_counter()
        await asyncio.gather(*(limiter.take_async(f"addr:c{i % width}") for i in range(n)))
        return [(time.perf_counter() - start) / n]  # seconds per take, amortised

    return lambda: loop.run_until_complete(run())


def _requests(client: TestClient, limiter: Any, n: int) -> Callable[[], list[float]]:
    def run() -> list[float]:
        client.app.state.guard.limiter = limiter
        out = []
        for _ in range(n):
            start = time.perf_counter()
            assert client.get("/v1/collections").status_code == 200
            out.append(time.perf_counter() - start)
        return out

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-round", type=int, default=100)
    parser.add_argument("--out", default="bench/results/shared_limits.json")
    args = parser.parse_args()
    from tests.cluster.pg_server import PgServer

    pg = PgServer(durable=True).start()
    try:
        url = pg.admin_url
        local = RateLimiter(RATE, BURST)
        shared = SharedRateLimiter([RateCounters(url, connect_timeout_s=2.0) for _ in range(CONNECTIONS)], RateLimiter(RATE, BURST))
        loop = asyncio.new_event_loop()
        loop.run_until_complete(shared.take_async("addr:warm"))  # connect and create the table outside the timing
        takes = _alternate({"local": _takes(local, loop, args.per_round), "shared": _takes(shared, loop, args.per_round)}, args.rounds)
        concurrent = _alternate({"local": _concurrent(local, loop, args.per_round),
                                 "shared": _concurrent(shared, loop, args.per_round)}, args.rounds)
        shared.close()
        loop.close()
        with tempfile.TemporaryDirectory() as data, TestClient(create_app(Settings(
                data_dir=Path(data), catalog_url=url, limits={"rate_per_s": RATE, "rate_burst": BURST},
                encoders={"default_audio": "audio-baseline", "default_image": "image-baseline"}))) as client:
            app_shared = client.app.state.guard.limiter  # the app's own: bound to the TestClient's loop
            assert isinstance(app_shared, SharedRateLimiter)
            client.get("/v1/collections")
            requests = _alternate({"local": _requests(client, local, args.per_round),
                                   "shared": _requests(client, app_shared, args.per_round)}, args.rounds)
            assert app_shared.local_decisions == 0, "the catalog's counters failed during the run"
    finally:
        pg.stop()
    result = {
        "take": {arm: _summary(_flat(t)) for arm, t in takes.items()},
        "request": {arm: _summary(_flat(t)) for arm, t in requests.items()},
        "concurrent_16": {arm: {"takes_per_s": round(1 / statistics.median(_flat(t)))} for arm, t in concurrent.items()},
        # the answer: what the shared limiter adds to a request, paired round by round
        "overhead_take_p50_us": _paired_p50_difference_us(takes),
        "overhead_request_p50_us": _paired_p50_difference_us(requests),
    }
    out = {"what": __doc__.splitlines()[0], "rounds": args.rounds, "per_round": args.per_round,
           "postgresql": "local server on loopback, fsync on; rate_counters is UNLOGGED (no WAL flush per take)",
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_1m": round(os.getloadavg()[0], 2)},
           "note": "PostgreSQL, the app and the client share the machine's cores; a remote PostgreSQL adds its network "
                   "round trip to every take",
           "results": result, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_results(out, args.out)


if __name__ == "__main__":
    main()
