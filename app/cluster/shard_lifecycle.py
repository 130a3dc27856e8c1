"""Shard actors that outlive their collection: found by name and retired (the orphan sweep).

A sharded collection's actors are detached (they outlive every API process) and named after the
collection's name and creation time (app/cluster/remote_index.actor_name). Deleting the collection
retires them; but a delete acknowledged just before the Ray head was lost, or a create whose shards
could not be opened (its catalog row withdrawn again, app/usecases/services.py), can leave actors
whose collection no longer exists. On a restarted head they are gone anyway; on a head that comes
back with its actors (a network partition, not a restart) they would linger, holding memory and
writing snapshots. :func:`sweep_orphan_shards` retires every shard actor of this catalog whose
(name, created_at) the catalog no longer has; the head watch runs it on each rejoin.

Races: the actors are listed before the catalog is read, and a collection's catalog row is written
before its actors are made, so an actor of a collection being created is never taken for an orphan.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable

from app.cluster.ray_runtime import GATE, NAMESPACE, head_lost
from app.cluster.remote_index import catalog_prefix, retire_shards
from app.storage.records import Collection

log = logging.getLogger(__name__)


def orphan_shards(actor_names: Iterable[str], catalog_url: str, collections: Iterable[Collection]) -> list[str]:
    """The names among ``actor_names`` of shard actors of this catalog whose collection it no longer has."""
    prefix = catalog_prefix(catalog_url)
    live = {f"{prefix}{c.name}:{c.created_at!r}:" for c in collections}  # actor_name without "<n>/<count>"
    return sorted(n for n in actor_names if n.startswith(prefix) and n[: n.rfind(":") + 1] not in live)


def sweep_orphan_shards(catalog: Any, catalog_url: str) -> list[str]:
    """Retire (snapshots deleted, actor ended) every orphan shard actor of this catalog; their names.

    Nothing is done while the head is lost or left (the next rejoin sweeps again)."""
    import ray

    if head_lost() or GATE.closed:
        return []
    with GATE.use():
        names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a.get("namespace") == NAMESPACE]
        orphans = orphan_shards(names, catalog_url, catalog.list_collections())
        actors = []
        for name in orphans:
            try:
                actors.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:  # retired meanwhile
                pass
    if actors:
        retire_shards(actors)
        log.warning("retired %d shard actor(s) of deleted collections: %s", len(actors), ", ".join(orphans))
    return orphans
