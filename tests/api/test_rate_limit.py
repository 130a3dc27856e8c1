"""The per-client token bucket: its arithmetic against a brute-force model, and its 429 with Retry-After."""

from __future__ import annotations

import math
import random

from fastapi.testclient import TestClient

from app.api.rate_limit import PRUNE_AT, RateLimiter
from app.main import create_app
from app.usecases.keys import KeyFile
from tests.conftest import error_of, make_settings


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def brute_force_allowed(arrivals: list[float], rate: float, burst: int, step: float = 1e-4) -> list[bool]:
    """The bucket simulated in small time steps (not the closed form the limiter uses)."""
    tokens, t, out = float(burst), 0.0, []
    for arrival in arrivals:
        while t + step <= arrival:
            tokens = min(burst, tokens + rate * step)
            t += step
        tokens = min(burst, tokens + rate * (arrival - t))
        t = arrival
        if tokens >= 1.0 - 1e-6:
            tokens -= 1.0
            out.append(True)
        else:
            out.append(False)
    return out


def test_the_bucket_matches_a_step_by_step_simulation():
    rng = random.Random(7)
    for rate, burst in ((5.0, 3), (50.0, 10), (0.5, 1)):
        clock = FakeClock()
        limiter = RateLimiter(rate, burst, clock)
        arrivals = sorted(rng.uniform(0, 40 / rate) for _ in range(200))
        got = []
        for arrival in arrivals:
            clock.now = arrival
            got.append(limiter.take("c") == 0.0)
        expected = brute_force_allowed(arrivals, rate, burst)
        # the simulation's rounding may flip a request landing within a step of a token's return
        assert sum(g != e for g, e in zip(got, expected)) <= 2, (rate, burst)
        # and the closed form holds exactly: in any window, allowed <= burst + rate * length
        allowed = [a for a, ok in zip(arrivals, got) if ok]
        for i in range(len(allowed)):
            for j in range(i, len(allowed)):
                assert j - i + 1 <= burst + rate * (allowed[j] - allowed[i]) + 1e-9


def test_a_refused_request_is_told_when_a_token_is_back():
    clock = FakeClock()
    limiter = RateLimiter(rate=4.0, burst=2, clock=clock)
    assert limiter.take("a") == 0.0 and limiter.take("a") == 0.0
    wait = limiter.take("a")
    assert math.isclose(wait, 0.25)
    assert limiter.take("b") == 0.0  # buckets are per client
    clock.now += wait
    assert limiter.take("a") == 0.0
    assert limiter.take("a") > 0


def test_full_buckets_are_dropped_so_many_addresses_do_not_grow_the_table():
    clock = FakeClock()
    limiter = RateLimiter(rate=10.0, burst=5, clock=clock)
    for n in range(PRUNE_AT):
        limiter.take(f"addr-{n}")
    clock.now += 1.0  # every one of them is full again
    limiter.take("busy")
    limiter.take("late")
    assert len(limiter) <= 2


def test_a_zero_rate_turns_the_limit_off():
    limiter = RateLimiter(rate=0, burst=1)
    assert all(limiter.take("a") == 0.0 for _ in range(100))


def test_over_the_rate_a_key_gets_429_with_retry_after_and_other_keys_do_not(tmp_path):
    settings = make_settings(tmp_path, limits={"rate_per_s": 0.5, "rate_burst": 3})
    keys = KeyFile(settings.resolved_keys_file())
    first, _ = keys.create("read")
    second, _ = keys.create("read")
    with TestClient(create_app(settings)) as client:
        statuses = [client.get("/v1/collections", headers={"X-API-Key": first}).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        refused = client.get("/v1/collections", headers={"X-API-Key": first})
        assert refused.status_code == 429
        assert error_of(refused)["code"] == "rate_limited"
        assert 1 <= int(refused.headers["retry-after"]) <= 2  # one token at 0.5/s: within 2 s
        assert client.get("/v1/collections", headers={"X-API-Key": second}).status_code == 200
        # a refused key is refused before its scope or body is looked at, and health stays open
        assert client.get("/healthz").status_code == 200 and client.get("/metrics").status_code == 200
        # a missing key is 401, not a token from anyone's bucket
        assert client.get("/v1/collections").status_code == 401


def test_with_keys_off_the_limit_is_per_address(tmp_path):
    with TestClient(create_app(make_settings(tmp_path, limits={"rate_per_s": 0.5, "rate_burst": 2}))) as client:
        assert [client.get("/v1/encoders").status_code for _ in range(3)] == [200, 200, 429]
        limiter = client.app.state.guard.limiter
        assert limiter.take("addr:another-host") == 0.0  # another address has its own bucket
