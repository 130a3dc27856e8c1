"""Per-client token buckets: a client over its rate gets 429 with Retry-After.

A client is its API key's id (``rk_<id>_…``; ``env-<n>`` for a plain key from settings), or its
address when keys are off. Each bucket holds up to ``burst`` tokens and refills at ``rate`` tokens
per second; a request takes one. Buckets are kept only while they are below ``burst``: a full
bucket is the same as no bucket, so the table stays small whatever the number of addresses.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Callable

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

    def _prune(self, now: float) -> None:
        full = [c for c, (tokens, when) in self._buckets.items() if tokens + (now - when) * self.rate >= self.burst]
        for client in full:
            del self._buckets[client]

    def __len__(self) -> int:
        return len(self._buckets)


def retry_after_header(wait_s: float) -> str:
    """Retry-After takes whole seconds (RFC 9110); round up so a client that obeys it is served."""
    return str(max(1, math.ceil(wait_s)))
