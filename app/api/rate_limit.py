"""Per-client token buckets: a client over its rate gets 429 with Retry-After.

Embedded mode keeps the buckets in the process (:class:`RateLimiter`). Cluster mode (a shared
PostgreSQL catalog) keeps them in the catalog so the rate holds for the whole cluster, not per
API process (:class:`SharedRateLimiter`, app/storage/rate_counters.py).

A client is its API key's id (``rk_<id>_…``; ``env-<n>`` for a plain key from settings), or its
address when keys are off. Each bucket holds up to ``burst`` tokens and refills at ``rate`` tokens
per second; a request takes one. Buckets are kept only while they are below ``burst``: a full
bucket is the same as no bucket, so the table stays small whatever the number of addresses.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any, Callable

log = logging.getLogger(__name__)

PRUNE_AT = 10_000  # buckets kept before the full ones are dropped


class RateLimiter:
    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tokens, when)
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.rate > 0

    def take(self, client: str) -> float:
        """Take one token: 0.0 when allowed, else the seconds until a token is back (for Retry-After)."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        with self._lock:
            tokens, when = self._buckets.get(client, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - when) * self.rate)
            if tokens < 1.0:
                self._buckets[client] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self._buckets[client] = (tokens - 1.0, now)
            if len(self._buckets) > PRUNE_AT:
                self._prune(now)
            return 0.0

    async def take_async(self, client: str) -> float:
        return self.take(client)

    def _prune(self, now: float) -> None:
        full = [c for c, (tokens, when) in self._buckets.items() if tokens + (now - when) * self.rate >= self.burst]
        for client in full:
            del self._buckets[client]

    def __len__(self) -> int:
        return len(self._buckets)


class SharedRateLimiter:
    """Cluster mode: each client's bucket is a row in the PostgreSQL catalog, shared by every replica.

    One statement per request, on one of a few connections of its own (``connections``, each a
    RateCounters: app/storage/rate_counters.py; one statement at a time on each, so a handful of
    requests are in flight at once). When the catalog cannot be reached (or does not answer within
    ``timeout_s``) the request is decided by this process's own bucket (``local``, same rate and
    burst), and the catalog is left alone for ``backoff_s``. That fails open to the per-process
    limit rather than closed: the limit protects the service from a client, it is not a bill, and
    a PostgreSQL restart already answers writes with 503 while searches still work from the
    shards; refusing every request for the length of the outage would turn it into a total one.
    During the outage a client can make at most ``replicas x rate`` requests, the embedded limit
    per process, never unbounded.
    """

    def __init__(self, connections: list[Any], local: RateLimiter, timeout_s: float = 0.5, backoff_s: float = 2.0,
                 prune_s: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.connections = connections
        self.local = local
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.prune_s = prune_s
        self.clock = clock
        self.local_decisions = 0  # requests decided by the fallback (while the catalog was unreachable)
        self._down_until = 0.0
        self._pruned_at = clock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: asyncio.Queue | None = None

    # rate and burst are the local bucket's, so the two never disagree
    rate = property(lambda self: self.local.rate, lambda self, v: setattr(self.local, "rate", v))
    burst = property(lambda self: self.local.burst, lambda self, v: setattr(self.local, "burst", v))

    @property
    def enabled(self) -> bool:
        return self.local.enabled

    def _idle_connections(self) -> asyncio.Queue:
        """The connections not in use; a new event loop (a test client) starts afresh."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop or self._idle is None:
            self.close()  # an async connection belongs to the loop that opened it
            self._loop, self._idle = loop, asyncio.Queue()
            for counters in self.connections:
                self._idle.put_nowait(counters)
        return self._idle

    async def take_async(self, client: str) -> float:
        if not self.enabled:
            return 0.0
        if self.clock() < self._down_until:
            return self._locally(client)
        idle = self._idle_connections()
        counters = await idle.get()
        try:
            if self.clock() < self._down_until:  # it failed while this request waited for a connection
                return self._locally(client)
            wait = await asyncio.wait_for(counters.take(client, self.rate, self.burst), self.timeout_s)
        except asyncio.CancelledError:  # the client went away mid-statement: that connection's state is unknown
            counters.drop()
            raise
        except Exception as exc:  # noqa: BLE001 - unreachable, restarting, timed out: decide locally
            self._unavailable(counters, exc)
            return self._locally(client)
        finally:
            idle.put_nowait(counters)
        if self.clock() - self._pruned_at > self.prune_s:
            self._pruned_at = self.clock()
            await self._prune()
        return wait

    def _unavailable(self, counters: Any, exc: BaseException) -> None:
        counters.drop()
        self._down_until = self.clock() + self.backoff_s
        log.warning("rate limit: the catalog's counters are unavailable (%s: %s); per-process buckets for %.0f s",
                    type(exc).__name__, exc, self.backoff_s)

    async def _prune(self) -> None:
        """Delete the full buckets' rows, now and then; a failure here changes no decision."""
        idle = self._idle_connections()
        counters = await idle.get()
        try:
            await asyncio.wait_for(counters.prune(), self.timeout_s)
        except asyncio.CancelledError:
            counters.drop()
            raise
        except Exception as exc:  # noqa: BLE001
            self._unavailable(counters, exc)
        finally:
            idle.put_nowait(counters)

    def _locally(self, client: str) -> float:
        self.local_decisions += 1
        return self.local.take(client)

    def take(self, client: str) -> float:
        """The synchronous path has no connection to wait on: this process's bucket."""
        return self._locally(client)

    def close(self) -> None:
        for counters in self.connections:
            counters.drop()


CONNECTIONS = 4  # statements in flight at once per process; PostgreSQL's max_connections counts them


def build_limiter(rate: float, burst: int, catalog_url: str | None) -> RateLimiter | SharedRateLimiter:
    """Per-process buckets in embedded mode; with a shared catalog, buckets in it for the whole cluster."""
    local = RateLimiter(rate, burst)
    if not catalog_url:
        return local
    from app.storage.rate_counters import RateCounters  # psycopg: cluster mode only

    return SharedRateLimiter([RateCounters(catalog_url, connect_timeout_s=2.0) for _ in range(CONNECTIONS)], local)


def retry_after_header(wait_s: float) -> str:
    """Retry-After takes whole seconds (RFC 9110); round up so a client that obeys it is served."""
    return str(max(1, math.ceil(wait_s)))
