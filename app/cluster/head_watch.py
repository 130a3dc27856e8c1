"""Readiness follows the Ray head: /readyz answers 503 while it cannot be reached; a head back is rejoined.

A lost head: this task probes the head's address every ``interval_s`` and keeps one reason in
``services.not_ready`` while it does not answer, so the balancer stops sending requests, and marks
the head lost (app/cluster/ray_runtime.mark_head_lost), so Ray-bound encodes answer 503 at once
instead of waiting on workers that are gone. Searches of sharded collections are answered by
shard processes that outlive their head for a while, else answer 503 naming the missing shard.

A head that stays away would end this process: Ray's core worker in it exits once its GCS has been
unreachable for ``gcs_rpc_server_reconnect_timeout_s`` (60 s by default). So after a quarter of
that (:func:`disconnect_after_s`) the process leaves the lost cluster (ray_runtime.disconnect,
``ray.shutdown()``), before Ray's clock runs out: however long the outage, the process stays up,
catalog-only routes keep answering, and what needs Ray answers 503 with Retry-After.

A head that answers again is a new, empty Ray cluster: the shard actors and embedding workers
this process knows are gone. So the process joins it (ray_runtime.reconnect) and drops its
sharded collections, under the lock request paths take to open a collection; the next request
(or the follower, within a second) opens each again, which starts its shard actors on the new
head, and each loads its partition's snapshot where it finds one on its node, else the catalog.
Embedding workers are started again on the new head here (and by the first encode sent to them,
app/cluster/embedding.py, should that come first).

An API process running on a Ray node of its own (docker/ray-node-serve.sh) cannot rejoin that way:
the node's raylet does not outlive its head, and a driver must run on a node. When the head has
answered for ``NO_NODE_GRACE_S`` and joining still finds no node of its cluster on this machine,
the process exits (code 3, after saying why) so that its supervisor starts node and process again;
before, Ray itself ended the process after 60 s, head back or not.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from typing import Any

from app.cluster import ray_runtime

log = logging.getLogger(__name__)

INTERVAL_S = 2.0
# Ray's clock starts when the GCS connection fails; this one at the first failed probe (up to two
# intervals later on a dead machine). Then the wait for calls in flight (a shard call's timeout, within
# an eighth and a quarter) and ray.shutdown() (~5 s with the head gone): 4 + 15 + 11 + 5 = 35 s of Ray's 60.
DISCONNECT_AFTER = 1 / 4
GATE_WAIT = (1 / 8, 1 / 4)
# a restarted head's own node registers within seconds; this long without one here means it is not coming
NO_NODE_GRACE_S = 60.0
EXIT_NO_NODE = 3


def exit_process(code: int) -> None:
    """Ends the process now, as Ray's own limit did (replaced in tests)."""
    logging.shutdown()
    os._exit(code)


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


def disconnect_after_s() -> float:
    """How long a head may stay unreachable before this process leaves it: well inside Ray's own limit."""
    return ray_runtime.gcs_timeout_s() * DISCONNECT_AFTER


async def watch_head(services: Any, interval_s: float = INTERVAL_S, address: str | None = None) -> None:
    """Runs until cancelled; checks membership each round, since start-up rewrites ``not_ready`` as it loads."""
    from app.cluster.ray_connect import NoLocalNode

    lost_at: float | None = None  # monotonic time of the first failed probe of this outage
    no_node_at: float | None = None  # ... of the first rejoin that found no Ray node here
    while True:
        address = head_address() or address  # kept while Ray is disconnected for a rejoin
        if address is not None:
            ok = await asyncio.to_thread(reachable, address, interval_s)
            reason = (f"the Ray head at {address} cannot be reached (RECALL_RAY_ADDRESS): index shards and "
                      "embedding workers are unavailable")
            if not ok:
                if lost_at is None:
                    lost_at = time.monotonic()
                    ray_runtime.mark_head_lost(True)
                    log.error("%s", reason)
                if reason not in services.not_ready:
                    services.not_ready = [*services.not_ready, reason]
                if ray_runtime.connected() and time.monotonic() - lost_at >= disconnect_after_s():
                    await asyncio.to_thread(leave, address, services.settings.cluster.shard_timeout_s)
            elif lost_at is not None or reason in services.not_ready:
                log.warning("the Ray head at %s answers again; rejoining it", address)
                try:
                    await asyncio.to_thread(rejoin, services)
                except NoLocalNode as exc:
                    no_node_at = no_node_at or time.monotonic()
                    if time.monotonic() - no_node_at >= NO_NODE_GRACE_S:
                        log.critical("the Ray head at %s is back, but for %.0f s this machine has had no Ray node of "
                                     "its cluster (%s): exiting, for the supervisor to start this machine's node and "
                                     "this process again", address, NO_NODE_GRACE_S, exc)
                        exit_process(EXIT_NO_NODE)
                    log.warning("could not rejoin the Ray head at %s yet: %s", address, exc)
                except Exception:  # noqa: BLE001 - not up yet after all: stay not ready, try again next round
                    log.exception("could not rejoin the Ray head at %s", address)
                else:
                    lost_at = no_node_at = None
                    ray_runtime.mark_head_lost(False)
                    services.not_ready = [r for r in services.not_ready if r != reason]
        await asyncio.sleep(interval_s)


def leave(address: str, shard_timeout_s: float) -> None:
    """Leave the lost cluster before Ray's core worker ends this process (ray_runtime.disconnect).

    Shard calls in flight end by their timeout (a shard outliving its head may still answer), so the
    gate waits that long, within bounds that leave ray.shutdown() its time inside Ray's limit.
    """
    limit = ray_runtime.gcs_timeout_s()
    log.warning("the Ray head at %s has been unreachable for %.0f s: leaving its cluster before Ray's own limit "
                "(%s=%.0f s) would end this process; sharded searches answer 503 until it is back",
                address, disconnect_after_s(), ray_runtime.GCS_TIMEOUT_VARIABLE, limit)
    start = time.monotonic()
    shortest, longest = (limit * share for share in GATE_WAIT)
    ray_runtime.disconnect(min(longest, max(shortest, shard_timeout_s + 1.0)))
    log.warning("left the Ray cluster of %s in %.1f s", address, time.monotonic() - start)


def rejoin(services: Any) -> int:
    """Rejoin a restarted head and drop the sharded collections, to be reopened on it; how many were dropped."""
    from app.cluster.remote_index import RemoteCollectionIndex

    with services.open_gate.exclusive():  # no request opens a collection on the old connection meanwhile
        ray_runtime.reconnect(services.settings.ray_address, services.settings.cluster)
        stale = [(name, state) for name, state in services.collections.items() if isinstance(state.index, RemoteCollectionIndex)]
        for name, state in stale:
            services.collections.pop(name, None)
            services.retired.append(state)  # its scan batchers are stopped by the follower
    reopen = getattr(services.encoders, "reopen_workers", None)
    if reopen is not None:  # embedding workers start on the new head while the first encodes are on their way
        reopen()
    try:  # shard actors of collections deleted meanwhile, on a head that kept its actors (app/cluster/shard_lifecycle.py)
        from app.cluster.shard_lifecycle import sweep_orphan_shards

        sweep_orphan_shards(services.catalog, services.settings.catalog_url)
    except Exception:  # noqa: BLE001 - the catalog may be away too: the next rejoin sweeps again
        log.exception("could not sweep orphan shard actors on the rejoined head")
    return len(stale)
