"""Readiness follows the Ray head: /readyz answers 503 while it cannot be reached.

When the head (its GCS) goes away, a process joined to it keeps running for a minute and then
Ray ends it ("Failed to connect to GCS within 60 seconds"): its restart then stops at start
with the message of app/cluster/ray_connect.py until the head is back. During that minute every
search would answer 503 for its shards, so the balancer should stop sending requests: this task
probes the head's address every ``interval_s`` and keeps one reason in ``services.not_ready``
while it does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from typing import Any

log = logging.getLogger(__name__)

INTERVAL_S = 2.0


def head_address() -> str | None:
    """``host:port`` of the GCS this process is joined to; None before Ray connects or with Ray Client."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - Ray Client has no GCS address to probe
        return None


def reachable(address: str, timeout: float) -> bool:
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        return True
    except OSError:
        return False


async def watch_head(services: Any, interval_s: float = INTERVAL_S) -> None:
    """Runs until cancelled; checks membership each round, since start-up rewrites ``not_ready`` as it loads."""
    while True:
        address = head_address()
        if address is not None:
            ok = await asyncio.to_thread(reachable, address, interval_s)
            reason = (f"the Ray head at {address} cannot be reached (RECALL_RAY_ADDRESS): index shards and "
                      "embedding workers are unavailable")
            if not ok and reason not in services.not_ready:
                log.error("%s", reason)
                services.not_ready = [*services.not_ready, reason]
            elif ok and reason in services.not_ready:
                log.warning("the Ray head at %s answers again", address)
                services.not_ready = [r for r in services.not_ready if r != reason]
        await asyncio.sleep(interval_s)
