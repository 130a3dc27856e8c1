"""Which index a collection gets when the catalog is shared (cluster mode).

* ``RECALL_RAY_ADDRESS`` unset: an in-process index built from the shared catalog and kept up
  to date by replaying its sequence numbers (every API process holds a full copy);
* set: a facade over ``RECALL_INDEX_SHARDS`` Ray shard actors, each holding a hash partition.
"""

from __future__ import annotations

from typing import Any

from app.settings import Settings
from app.storage.index_store import CollectionIndex
from app.storage.protocol import CatalogProtocol
from app.storage.records import Collection


def open_shared_index(settings: Settings, catalog: CatalogProtocol, collection: Collection) -> Any:
    if settings.ray_address:
        from app.cluster.remote_index import RemoteCollectionIndex

        return RemoteCollectionIndex.open(collection, settings)
    return CollectionIndex.build(collection, catalog, settings.index.shards, auto_windows=settings.index.auto_ivf_windows)


def ensure_openable(settings: Settings) -> None:
    """Before a new collection's catalog row is written: with Ray shards, 503 ray_unavailable while the head is
    lost (the create would leave a row whose index cannot be opened); in-process indices need nothing."""
    if settings.ray_address:
        from app.cluster.ray_runtime import require_head

        require_head("creating a sharded collection (its shard actors)")


def withdraw_failed_create(settings: Settings, catalog: CatalogProtocol, collection: Collection) -> None:
    """A create whose index could not be opened: its catalog row goes again (if still this one), and with Ray
    any shard actor it made is retired, so the name is free and nothing of it lingers."""
    version = catalog.collection_version(collection.name)
    if version is not None and version[0] == collection.created_at:
        catalog.delete_collection(collection.name)
    if settings.ray_address and settings.catalog_url:
        from app.cluster.shard_lifecycle import sweep_orphan_shards

        sweep_orphan_shards(catalog, settings.catalog_url)
