"""One index shard of one collection, as a Ray actor.

A shard holds the binary and float indices of the items whose id hashes to it
(``crc32(item id) % shards``, so all windows of an item are on one shard). It never receives
writes: before answering, it replays the catalog up to the sequence the API process read when
the request began (``min_seq``), so any write acknowledged before the search started is in
the answer. When Ray restarts a dead shard it runs ``__init__`` again, which rebuilds the
partition from PostgreSQL: nothing is lost because nothing lives only here.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from app.cluster.topk import ordered_topk
from app.index import BinaryIndex, FloatIndex
from app.storage.index_store import CollectionIndex
from app.storage.records import Collection


class ShardActor:
    def __init__(self, catalog_url: str, collection: Collection, number: int, count: int, scan_threads: int = 1) -> None:
        from app.storage.postgres import PostgresCatalog

        self.number, self.count = number, count
        self.catalog = PostgresCatalog(catalog_url)
        self.index = CollectionIndex.build(collection, self.catalog, scan_threads, partition=(number, count))

    def _catch_up(self, min_seq: int) -> None:
        if min_seq > self.index.applied_seq:
            self.index.catch_up(self.catalog, min_seq)

    def sync(self, min_seq: int) -> dict[str, Any]:
        """Replay up to ``min_seq``; returns the shard's size."""
        self._catch_up(min_seq)
        return self.stats()

    def stats(self) -> dict[str, Any]:
        return {"shard": self.number, "segments": len(self.index), "memory_bytes": self.index.memory_bytes(),
                "applied_seq": self.index.applied_seq, "pid": os.getpid()}

    def search(self, kind: str, queries: np.ndarray, k: int, min_seq: int) -> tuple[np.ndarray, np.ndarray, int]:
        """This shard's top k under the cluster's tie rule (app/cluster/topk.py), and its size."""
        self._catch_up(min_seq)
        index = getattr(self.index, kind)
        cls = BinaryIndex if kind == "binary" else FloatIndex
        scores, ids = ordered_topk(index, queries, k, ascending=cls.ASCENDING, pad_value=cls.PAD_VALUE)
        return scores, ids, len(self.index)

    def reconstruct(self, kind: str, ids: np.ndarray, min_seq: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids found here, their vectors)."""
        self._catch_up(min_seq)
        return getattr(self.index, kind).reconstruct_present(np.asarray(ids, dtype=np.int64))

    def ids(self, kind: str) -> np.ndarray:
        return getattr(self.index, kind).ids()

    def pid(self) -> int:
        return os.getpid()
