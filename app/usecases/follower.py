"""How an API process sharing the catalog learns of commits made by the others.

Before a request uses a collection, :func:`sync_collection` asks the catalog for the
collection's (created_at, last sequence) in one round trip and replays whatever this process
has not applied yet. So a write acknowledged by any process is visible to every search that
starts after the acknowledgement, on every process: read-your-writes across the cluster, at
the price of one indexed primary-key query per request. (LISTEN/NOTIFY would save that query
but could not promise the same: a notification can arrive after the search it should have
preceded.) A background loop also picks up collections created or deleted elsewhere, so
``GET /v1/collections`` converges within ``POLL_S`` even with no request naming them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from app.errors import RetryLater


class Services(Protocol):
    """What the follower needs of the services container (app/usecases/services.Services has it all). A
    protocol, so this module never imports the container that starts it: no import cycle, lazy or typed."""

    catalog: Any
    collections: dict[str, Any]  # name -> CollectionState
    retired: list[Any]
    open_gate: Any  # app/usecases/open_gate.OpenGate: what request paths pass before opening a collection

    def _open_collection(self, collection: Any) -> Any: ...


CollectionState = Any  # app/usecases/services.CollectionState: an open collection and its index


log = logging.getLogger(__name__)

POLL_S = 1.0
SYNC_WAIT_S = 2.0  # how long a request waits for its collection's opening (or a Ray rejoin) before answering 503


class CollectionOpening(RetryLater):
    """A collection is being opened (its shard actors starting or building their partitions): 503, retry shortly."""

    code = "collection_opening"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"collection {name!r} cannot be read yet: this process is opening it (its shard actors starting or "
            f"building their partitions from the catalog) or rejoining the Ray head; nothing was changed, retry in "
            f"{RETRY_AFTER_S} s",
            RETRY_AFTER_S, details={"reason": "collection_opening", "retry_after_s": RETRY_AFTER_S})
RETRY_AFTER_S = 2
EXPIRE_EVERY_S = 60.0  # tombstone expiry (every process does it; it is idempotent)


def sync_collection(services: "Services", name: str) -> None:
    """Bring one collection up to the catalog's latest commit (opening or dropping it as needed)."""
    version = services.catalog.collection_version(name)
    state = services.collections.get(name)
    if version is None:
        if state is not None:
            _retire(services, name, state)
        return
    created_at, seq = version
    if state is not None and state.collection.created_at != created_at:
        _retire(services, name, state)  # deleted and created again elsewhere under the same name
        state = None
    if state is None:
        collection = services.catalog.get_collection(name)
        services.collections[name] = services._open_collection(collection)
        return
    state.index.catch_up(services.catalog, seq)


def _sync_locked(services: "Services", name: str) -> None:
    with services.open_gate.collection(name, None):  # the lock request paths take: one opener per collection
        sync_collection(services, name)


def _retire(services: "Services", name: str, state: "CollectionState") -> None:
    if services.collections.get(name) is state:
        services.collections.pop(name, None)
    services.retired.append(state)  # its scan batchers are stopped by the follow loop


async def follow(services: "Services") -> None:
    """Poll for collections created or deleted by other processes; stop retired scanners; expire old tombstones."""
    last_expiry = 0.0
    while True:
        try:
            names = {c.name for c in await asyncio.to_thread(services.catalog.list_collections)}
            for name in sorted(names | set(services.collections)):
                await asyncio.to_thread(_sync_locked, services, name)
            if time.time() - last_expiry > EXPIRE_EVERY_S:
                last_expiry = time.time()
                cutoff = last_expiry - services.settings.cluster.tombstone_retention_s
                for name in sorted(names):
                    await asyncio.to_thread(services.catalog.expire_tombstones, name, cutoff)
            while services.retired:
                state = services.retired.pop()
                await services.close_state(state)
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - a catalog hiccup must not end the loop
            log.exception("following the shared catalog failed; retrying")
        await asyncio.sleep(POLL_S)
