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
