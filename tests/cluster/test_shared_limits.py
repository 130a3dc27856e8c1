"""Limits that hold for the whole cluster: two API instances on one PostgreSQL catalog share one budget.

The rate limit's buckets are rows in the catalog (app/storage/rate_counters.py) and the ingest job
quota counts the catalog's unfinished jobs (app/storage/job_rows.py ``create_job_if_room``), so
a client that spends its budget half on one replica and half on the other is refused (429 in the
one error shape, Retry-After) where either replica alone would still have let it through.
Embedded mode keeps per-process buckets (tests/api/test_rate_limit.py).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from contextlib import ExitStack

import pytest
from fastapi.testclient import TestClient

from app.api.rate_limit import RateLimiter, SharedRateLimiter, build_limiter
from app.main import create_app
from app.storage.rate_counters import RateCounters
from tests.conftest import error_of, make_settings, tone_wav


def _apps(tmp_path, url: str, n: int = 2, **limits) -> list[dict]:
    """``n`` API instances (each its own data dir, as separate processes would have) on one catalog."""
    return [make_settings(tmp_path / f"r{i}", catalog_url=url, limits=limits) for i in range(n)]


def _assert_rate_limited(response) -> None:
    assert response.status_code == 429, response.text
    body = error_of(response)
    assert body["code"] == "rate_limited" and body["details"]["retry_after_s"] > 0
    assert int(response.headers["retry-after"]) >= 1


def test_two_replicas_share_one_rate_budget(tmp_path, pg_url):
    # 4 requests at once, then one per 100 s: the budget is spent by the 4th request, whichever replica served it
    with ExitStack() as stack:
        a, b = (stack.enter_context(TestClient(create_app(s))) for s in _apps(tmp_path, pg_url, rate_per_s=0.01, rate_burst=4))
        assert isinstance(a.app.state.guard.limiter, SharedRateLimiter)
        a.app.state.guard.limiter.prune_s = 0.0  # A prunes after every take: live buckets are kept
        for client in (a, b, a, b):
            assert client.get("/v1/collections").status_code == 200
        # each replica has served 2 of its own burst of 4: alone it would still allow, together they refuse
        _assert_rate_limited(a.get("/v1/collections"))
        _assert_rate_limited(b.get("/v1/collections"))
        assert a.app.state.guard.limiter.local_decisions == 0  # every decision was the catalog's
        # the local buckets, were they used, would still have tokens: that is the difference
        assert all(c.app.state.guard.limiter.local.take("probe") == 0.0 for c in (a, b))
        # public routes are not counted
        assert b.get("/healthz").status_code == 200


def test_the_shared_bucket_refills_at_the_rate_and_its_wait_is_right(pg_url):
    async def run() -> list[float]:
        counters = RateCounters(pg_url, connect_timeout_s=2.0)
        try:
            waits = [await counters.take("c", 2.0, 3) for _ in range(4)]  # burst 3: the 4th waits ~0.5 s
            await asyncio.sleep(waits[-1] + 0.05)
            waits.append(await counters.take("c", 2.0, 3))  # refilled one token: allowed
            waits.append(await counters.take("c", 2.0, 3))  # and the next refused again
            return waits
        finally:
            await counters.close()

    waits = asyncio.run(run())
    assert waits[:3] == [0.0, 0.0, 0.0] and waits[4] == 0.0
    # a token every 0.5 s: the wait is at most that, less only the time the requests themselves took
    assert 0.3 < waits[3] <= 0.5 and 0.3 < waits[5] <= 0.5


def test_concurrent_takes_from_many_connections_never_spend_a_token_twice(pg_url):
    # 6 connections (6 replicas) race for a burst of 20 with a negligible refill: exactly 20 are allowed
    async def run() -> int:
        counters = [RateCounters(pg_url, connect_timeout_s=2.0) for _ in range(6)]
        try:
            async def many(c: RateCounters) -> int:
                return sum([await c.take("race", 0.001, 20) == 0.0 for _ in range(10)])

            return sum(await asyncio.gather(*(many(c) for c in counters)))
        finally:
            for c in counters:
                await c.close()

    assert asyncio.run(run()) == 20


def test_prune_drops_only_full_buckets(pg_url):
    import psycopg

    async def run() -> int:
        counters = RateCounters(pg_url, connect_timeout_s=2.0)
        try:
            await counters.take("slow", 0.001, 5)  # full again in 1000 s: a live bucket
            await counters.take("fast", 1000.0, 1)  # full again in 1 ms: the same as no row
            await asyncio.sleep(0.05)
            return await counters.prune()
        finally:
            await counters.close()

    assert asyncio.run(run()) == 1
    with psycopg.connect(pg_url) as db:
        assert [r[0] for r in db.execute("SELECT client FROM rate_counters")] == ["slow"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_with_the_catalog_unreachable_each_process_falls_back_to_its_own_bucket():
    # fail open to the per-process limit, not to no limit: the local bucket (rate 0.01, burst 2) decides
    limiter = build_limiter(0.01, 2, f"postgresql://postgres@127.0.0.1:{_closed_port()}/none")
    assert isinstance(limiter, SharedRateLimiter)

    async def run() -> list[float]:
        return [await limiter.take_async("c") for _ in range(3)]

    started = time.monotonic()
    waits = asyncio.run(run())
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0
    assert limiter.local_decisions == 3
    # refused connections are not retried per request while backing off: three answers, one connection attempt
    assert time.monotonic() - started < limiter.backoff_s
    limiter.close()


def test_after_its_backoff_the_limiter_goes_back_to_the_catalog(pg_url):
    limiter = build_limiter(0.01, 3, f"postgresql://postgres@127.0.0.1:{_closed_port()}/none")
    limiter.backoff_s = 0.2

    async def run() -> list[float]:
        waits = [await limiter.take_async("c")]  # unreachable: decided locally
        for counters in limiter.connections:
            counters.url = pg_url  # the catalog is back
        await asyncio.sleep(0.25)
        return waits + [await limiter.take_async("c") for _ in range(4)]

    waits = asyncio.run(run())
    assert limiter.local_decisions == 1
    # the catalog's bucket is fresh (burst 3): the local take while it was away is not counted there
    assert waits == [0.0, 0.0, 0.0, 0.0, waits[-1]] and waits[-1] > 0
    limiter.close()


def test_embedded_mode_keeps_per_process_buckets(tmp_path):
    assert type(build_limiter(5.0, 10, None)) is RateLimiter
    with TestClient(create_app(make_settings(tmp_path, limits={"rate_per_s": 0.01, "rate_burst": 2}))) as client:
        assert type(client.app.state.guard.limiter) is RateLimiter
        assert [client.get("/v1/collections").status_code for _ in range(3)] == [200, 200, 429]


def _hold_encoders(clients, release: threading.Event) -> None:
    for client in clients:
        encoder = client.app_state["services"].encoders.encoders["audio-baseline"]
        original = encoder.encode

        def held(batch, original=original):  # jobs stay running until the test lets them go
            release.wait(30)
            return original(batch)

        encoder.encode = held


def test_two_replicas_share_one_job_quota(tmp_path, pg_url):
    release = threading.Event()
    with ExitStack() as stack:
        a, b = (stack.enter_context(TestClient(create_app(s))) for s in _apps(tmp_path, pg_url, max_pending_jobs=2))
        assert a.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        _hold_encoders((a, b), release)
        try:
            jobs = [c.post("/v1/collections/au/items?wait=false", files=[("files", (f"{n}.wav", tone_wav(500 + 40 * n)))])
                    for n, c in enumerate((a, b))]
            assert [j.status_code for j in jobs] == [202, 202]
            # each replica accepted one of its own quota of 2: together the cluster's 2 are taken
            for client in (a, b):
                refused = client.post("/v1/collections/au/items?wait=false", files=[("files", ("x.wav", tone_wav(990)))])
                assert refused.status_code == 429 and refused.headers["retry-after"] == "5"
                body = error_of(refused)
                assert body["code"] == "overloaded" and body["details"] == {"pending_jobs": 2}
        finally:
            release.set()
        deadline = time.time() + 60
        for job in jobs:
            while (state := b.get(f"/v1/jobs/{job.json()['id']}").json())["status"] != "completed":
                assert state["status"] in ("queued", "running") and time.time() < deadline, state
                time.sleep(0.1)
        # room again, on either replica
        assert b.post("/v1/collections/au/items?wait=false", files=[("files", ("y.wav", tone_wav(610)))]).status_code == 202


@pytest.mark.parametrize("limit", [1, 3])
def test_job_admission_counts_the_catalogs_unfinished_jobs(pg_url, limit):
    from app.storage.postgres import PostgresCatalog

    catalog = PostgresCatalog(pg_url)
    try:
        admitted = [catalog.create_job_if_room(f"j{n}", "c", [("f.wav", None, {}, b"x")], time.time(), limit) for n in range(5)]
        assert admitted == [None] * limit + [limit] * (5 - limit)
        catalog.finish_job("j0", "completed", time.time())
        assert catalog.create_job_if_room("late", "c", [], time.time(), limit) is None  # a finished job frees its place
    finally:
        catalog.close()
