"""Readiness follows the Ray head: /readyz answers 503 while it cannot be reached; a head back is rejoined.

When the head (its GCS) goes away, a process joined to it keeps running for a minute and then
Ray ends it ("Failed to connect to GCS within 60 seconds"): its restart then stops at start
with the message of app/cluster/ray_connect.py until the head is back. During that minute every
search answers 503 for its shards, so the balancer should stop sending requests: this task
probes the head's address every ``interval_s`` and keeps one reason in ``services.not_ready``
while it does not answer.

A head that answers again within that minute is a new, empty Ray cluster: the shard actors this
process knows are gone. So the process rejoins it (app/cluster/ray_runtime.reconnect) and drops
its sharded collections, under the lock request paths take to open a collection; the next request
(or the follower, within a second) opens each again, which starts its shard actors on the new
head, and each loads its partition's snapshot where it finds one on its node, else the catalog.
Embedding workers (``RECALL_CLUSTER__EMBED_WORKERS``) are not reopened: that needs a restart.
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
    address = None
    while True:
        address = head_address() or address  # kept while Ray is disconnected for a rejoin
        if address is not None:
            ok = await asyncio.to_thread(reachable, address, interval_s)
            reason = (f"the Ray head at {address} cannot be reached (RECALL_RAY_ADDRESS): index shards and "
                      "embedding workers are unavailable")
            if not ok and reason not in services.not_ready:
                log.error("%s", reason)
                services.not_ready = [*services.not_ready, reason]
            elif ok and reason in services.not_ready:
                log.warning("the Ray head at %s answers again; rejoining it", address)
                try:
                    await asyncio.to_thread(rejoin, services)
                except Exception:  # noqa: BLE001 - not up yet after all: stay not ready, try again next round
                    log.exception("could not rejoin the Ray head at %s", address)
                else:
                    services.not_ready = [r for r in services.not_ready if r != reason]
        await asyncio.sleep(interval_s)


def rejoin(services: Any) -> int:
    """Rejoin a restarted head and drop the sharded collections, to be reopened on it; how many were dropped."""
    from app.cluster.ray_runtime import reconnect
    from app.cluster.remote_index import RemoteCollectionIndex

    with services._sync_lock:  # no request opens a collection on the old connection meanwhile
        reconnect(services.settings.ray_address, services.settings.cluster)
        stale = [(name, state) for name, state in services.collections.items() if isinstance(state.index, RemoteCollectionIndex)]
        for name, state in stale:
            services.collections.pop(name, None)
            services.retired.append(state)  # its scan batchers are stopped by the follower
    return len(stale)
