"""One index shard of one collection, as a Ray actor.

A shard holds the binary and float indices of the items whose id hashes to it
(``crc32(item id) % shards``, so all windows of an item are on one shard). It never receives
writes: before answering, it replays the catalog up to the sequence the API process read when
the request began (``min_seq``), so any write acknowledged before the search started is in
the answer.

Snapshots: a background thread writes the partition, every ``snapshot_s`` seconds when it has
changed, in the single-process index's snapshot format (app/storage/index_store.py: one atomic
file per index kind with the sequence it includes) under ``snapshot_dir``, one folder per shard
actor (the actor's name, hashed: one owner per folder). When Ray restarts a dead shard it runs
``__init__`` again, which loads that snapshot and replays only the catalog's writes after it
(its own partition's rows); without a usable snapshot it rebuilds the partition from PostgreSQL.
Either way nothing is lost, because nothing lives only here; the snapshot only makes it quick.

Index kinds (app/index/kinds.py): the partition's binary codes live in the single-process
:class:`~app.index.AdaptiveBinaryIndex` under the collection's index setting, so a shard answers
from its exact flat index until its IVF is trained (on a background thread, FAISS releasing the
GIL, so the actor keeps answering meanwhile) and swapped in atomically; deletes and upserts reach
both structures under one mutex. ``auto_windows`` (index.auto_ivf_windows) counts this shard's
partition, not the collection: the flat scan the threshold bounds is one shard's, since shards
scan in parallel, so a cluster of n shards stays exact up to ~n times the single-process count;
hashing balances partitions, so the shards of a collection cross it within a few per cent of each
other, and none has to ask the others. A newly published IVF makes a snapshot due, so a restart
loads it beside the flat codes instead of training it again; a snapshot without one (or with a
stale one) trains a new one in the background while flat answers.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.cluster.topk import ordered_topk
from app.index import BinaryIndex, FloatIndex
from app.storage.index_store import CollectionIndex
from app.storage.records import Collection

log = logging.getLogger(__name__)


def snapshot_folder(root: str | None, actor: str) -> Path:
    """Where the shard actor named ``actor`` keeps its snapshots (under the node's temp folder by default)."""
    base = Path(root) if root else Path(tempfile.gettempdir()) / "recall-shards"
    return base / hashlib.sha1(actor.encode()).hexdigest()[:20]


class ShardActor:
    def __init__(self, catalog_url: str, collection: Collection, number: int, count: int, scan_threads: int = 1,
                 snapshot_dir: str | None = None, snapshot_s: float = 0.0, actor: str = "", auto_windows: int = 0) -> None:
        from app.storage.postgres import PostgresCatalog

        started = time.monotonic()
        self.number, self.count = number, count
        self.catalog = PostgresCatalog(catalog_url)
        self.folder = snapshot_folder(snapshot_dir, actor or f"{collection.name}:{collection.created_at!r}:{number}/{count}")
        if snapshot_s > 0:
            self.index, self.opened = CollectionIndex.open_partition(collection, self.catalog, self.folder, scan_threads,
                                                                     (number, count), auto_windows)
        else:
            self.index = CollectionIndex.build(collection, self.catalog, scan_threads, partition=(number, count),
                                               auto_windows=auto_windows)
            self.opened = {"from": "catalog", "snapshot_seq": None, "replayed_to": self.index.applied_seq}
        self.opened["seconds"] = round(time.monotonic() - started, 4)
        self.snapshot_seq = self.opened["snapshot_seq"] if self.opened["from"] == "snapshot" else None
        self._stop = threading.Event()
        self._snapshot_lock = threading.Lock()  # the loop and an explicit call never write the same files at once
        if snapshot_s > 0:
            threading.Thread(target=self._snapshot_loop, args=(snapshot_s,), daemon=True, name="shard-snapshots").start()

    # --- snapshots ----------------------------------------------------------------------------

    def _snapshot_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                self.snapshot()
            except OSError as exc:  # a full or read-only disk: the catalog still has everything
                log.warning("shard %d/%d: snapshot not written (%s)", self.number + 1, self.count, exc)

    def snapshot(self) -> int | None:
        """Write the partition's snapshot now if it changed since the last one (new writes, or a newly
        trained IVF: ``unsnapshotted``); the sequence it holds."""
        with self._snapshot_lock:
            changed = self.snapshot_seq is None or self.index.applied_seq != self.snapshot_seq or self.index.unsnapshotted > 0
            if not self._stop.is_set() and changed:
                self.snapshot_seq = self.index.snapshot(None)  # no pruning: the shared tombstones expire by age
            return self.snapshot_seq

    def drop_snapshots(self) -> None:
        """The collection is gone (or re-sharded): stop snapshotting and delete the folder."""
        self._stop.set()
        with self._snapshot_lock:
            shutil.rmtree(self.folder, ignore_errors=True)

    # --- serving ------------------------------------------------------------------------------

    def _catch_up(self, min_seq: int) -> None:
        if min_seq > self.index.applied_seq:
            self.index.catch_up(self.catalog, min_seq)

    def sync(self, min_seq: int) -> dict[str, Any]:
        """Replay up to ``min_seq``; returns the shard's size."""
        self._catch_up(min_seq)
        return self.stats()

    def stats(self) -> dict[str, Any]:
        return {"shard": self.number, "segments": len(self.index), "memory_bytes": self.index.memory_bytes(),
                "applied_seq": self.index.applied_seq, "pid": os.getpid(), "opened": self.opened,
                "snapshot_seq": self.snapshot_seq, "index": self.index.describe_index()}

    def search(self, kind: str, queries: np.ndarray, k: int, min_seq: int,
               nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray, int]:
        """This shard's top k under the cluster's tie rule (app/cluster/topk.py), and its size.

        ``nprobe``: the query's IVF override (binary only; ignored while flat answers)."""
        self._catch_up(min_seq)
        index = getattr(self.index, kind)
        if kind == "binary" and nprobe is not None:
            index = _Probing(index, int(nprobe))
        cls = BinaryIndex if kind == "binary" else FloatIndex
        scores, ids = ordered_topk(index, queries, k, ascending=cls.ASCENDING, pad_value=cls.PAD_VALUE)
        return scores, ids, len(self.index)

    def reconstruct(self, kind: str, ids: np.ndarray, min_seq: int) -> tuple[np.ndarray, np.ndarray]:
        """(ids found here, their vectors)."""
        self._catch_up(min_seq)
        return getattr(self.index, kind).reconstruct_present(np.asarray(ids, dtype=np.int64))

    def contents(self, kind: str, min_seq: int) -> tuple[int, np.ndarray, np.ndarray]:
        """(applied sequence, every id held, their vectors) after replaying to ``min_seq``: for the checker
        (app/cluster/consistency.py). Calls to one actor run one at a time, so no replay lands in between."""
        self._catch_up(min_seq)
        index = getattr(self.index, kind)
        ids = np.sort(index.ids())
        return self.index.applied_seq, ids, index.reconstruct(ids)

    def ids(self, kind: str) -> np.ndarray:
        return getattr(self.index, kind).ids()

    def pid(self) -> int:
        return os.getpid()


class _Probing:
    """A binary index seen through one query's nprobe, for :func:`ordered_topk` (which calls ``search(q, k)``)."""

    def __init__(self, index: Any, nprobe: int) -> None:
        self.index, self.nprobe = index, nprobe

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.index.search(queries, k, nprobe=self.nprobe)

    def __len__(self) -> int:
        return len(self.index)

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        return self.index.reconstruct(ids)
