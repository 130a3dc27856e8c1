"""The FAISS indices of one collection, kept in step with the catalog.

The catalog is the source of truth; indices are caches. Each change is applied after its
transaction commits. Snapshots are written atomically with the sequence number they include;
opening a collection loads its snapshots and replays catalog rows with a newer sequence. A
missing or corrupt snapshot, or an index whose ids disagree with the catalog afterwards, is
rebuilt from the catalog, so a crash at any instant leaves nothing acknowledged unsearchable.

The binary codes live in an :class:`~app.index.AdaptiveBinaryIndex`: the exact flat index always,
plus an IVF when the collection's index kind asks for one (app/index/kinds.py). The IVF is trained
on a background thread from the flat codes, which equal the catalog's at the applied sequence, and
is snapshotted beside the flat snapshot with the same sequence; a missing or stale IVF snapshot is
rebuilt the same way while the flat index answers.

The float vectors live on the heap (:class:`~app.index.FloatIndex`) or, when the collection's
index spec says ``floats: "mmap"``, in memory-mapped files (:class:`~app.index.MappedFloatIndex`):
the same snapshot file, the same replay and rebuild, only the rows' storage differs.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np

from app.index import AdaptiveBinaryIndex, FloatIndex, MappedFloatIndex, SnapshotError
from app.index.adaptive import ivf_path
from app.storage.records import Collection, WriteResult

Catalog = Any  # a CatalogProtocol (SQLite or PostgreSQL); kept loose to avoid an import cycle

log = logging.getLogger(__name__)


class CollectionIndex:
    """Binary and/or float index of one collection plus its snapshot bookkeeping."""

    def __init__(self, collection: Collection, directory: Path, shards: int, partition: tuple[int, int] | None = None,
                 auto_windows: int = 0) -> None:
        self.collection = collection
        self.partition = partition  # (shard number, shard count): only the items hashing there (cluster shard actors)
        self.directory = directory
        self.shards = shards
        self.auto_windows = auto_windows  # index.auto_ivf_windows: when an "auto" collection gets its IVF
        self.binary: AdaptiveBinaryIndex | None = self._new_binary() if "binary" in collection.index_kinds else None
        self.snapshots = True  # False when built from a shared catalog: no files of its own
        self.float: FloatIndex | None = self._new_float() if "float" in collection.index_kinds else None
        self.applied_seq = 0
        self.unsnapshotted = 0
        self._write_lock = threading.Lock()  # one writer at a time; the indices guard their own readers

    # --- paths ----------------------------------------------------------------------------

    def _path(self, kind: str) -> Path:
        return self.directory / f"{self.collection.name}.{kind}.faiss"

    def snapshot_paths(self) -> list[Path]:
        return [self._path(k) for k in ("binary", "float")]

    def _new_binary(self) -> AdaptiveBinaryIndex:
        return AdaptiveBinaryIndex(self.collection.bits, self.shards, self.collection.index_spec, self.auto_windows)

    def _ivf_published(self) -> None:
        self.unsnapshotted += 1  # the next snapshot (at the latest on shutdown) saves the new IVF

    def _new(self, kind: str) -> AdaptiveBinaryIndex | FloatIndex:
        return self._new_binary() if kind == "binary" else self._new_float()

    def _mapped_dir(self) -> Path | None:
        """Where mapped float files go: beside the snapshots (the data disk), or the temp folder
        when this index has no directory of its own (built from a shared catalog)."""
        return self.directory if self.snapshots else None

    def _new_float(self) -> FloatIndex:
        if self.collection.index_spec.floats == "mmap":
            return MappedFloatIndex(self.collection.dim, shards=self.shards, directory=self._mapped_dir())
        return FloatIndex(self.collection.dim, shards=self.shards)

    def maybe_build(self) -> None:
        """Start training the collection's IVF in the background when its kind and size ask for one."""
        if self.binary is not None:
            self.binary.on_published = self._ivf_published
            self.binary.maybe_build()

    def describe_index(self) -> dict[str, Any] | None:
        """Which index answers binary searches and where the floats live, for GET /v1/collections/{name}."""
        if self.binary is not None:
            found = self.binary.describe()
        elif isinstance(self.float, MappedFloatIndex):  # float only: nothing answers binary searches
            found = {**self.collection.index_spec.to_json(), "answering": None}
        else:
            return None
        found["floats"] = self.collection.index_spec.floats
        if isinstance(self.float, MappedFloatIndex):
            found["float_file_bytes"] = self.float.file_bytes()
        return found

    def indices(self) -> list[tuple[str, AdaptiveBinaryIndex | FloatIndex]]:
        return [(k, ix) for k, ix in (("binary", self.binary), ("float", self.float)) if ix is not None]

    # --- opening --------------------------------------------------------------------------

    @classmethod
    def open(cls, collection: Collection, catalog: Catalog, directory: Path, shards: int, auto_windows: int = 0) -> "CollectionIndex":
        """Load snapshots, replay newer catalog rows, and rebuild whatever cannot be trusted."""
        self = cls(collection, directory, shards, auto_windows=auto_windows)
        seqs = []
        for kind, _ in self.indices():
            seq = self._load_or_rebuild(kind, catalog)
            seqs.append(seq)
        self.applied_seq = catalog.last_seq(collection.name)
        expected = np.sort(catalog.all_segment_ids(collection.name))
        for kind, index in self.indices():
            if not np.array_equal(np.sort(index.ids()), expected):
                log.warning("%s/%s: index ids disagree with the catalog after replay; rebuilding", collection.name, kind)
                self._rebuild(kind, catalog)
        if seqs and min(seqs) < self.applied_seq:
            self.unsnapshotted = 1  # replayed rows: the next snapshot is worth writing
        self.maybe_build()
        return self

    def _load_or_rebuild(self, kind: str, catalog: Catalog) -> int:
        seq = self._load(kind)
        if seq is None:
            self._rebuild(kind, catalog)
            return catalog.last_seq(self.collection.name)
        self._replay(kind, catalog, seq)
        return seq

    def _load(self, kind: str) -> int | None:
        """Load one kind's snapshot; its sequence, or None when there is none usable (a warning if one was there)."""
        path = self._path(kind)
        try:
            if kind == "binary":
                index, seq = AdaptiveBinaryIndex.load(path, self.shards, self.collection.index_spec, self.auto_windows)
            elif self.collection.index_spec.floats == "mmap":
                index, seq = MappedFloatIndex.load(path, shards=self.shards, directory=self._mapped_dir())
            else:
                index, seq = FloatIndex.load(path, shards=self.shards)
            self._check_shape(kind, index)
        except (SnapshotError, FileNotFoundError, ValueError) as exc:
            if path.exists():
                log.warning("%s: snapshot unusable (%s); rebuilding from the catalog", path, exc)
            return None
        setattr(self, kind, index)
        return seq

    def _check_shape(self, kind: str, index: AdaptiveBinaryIndex | FloatIndex) -> None:
        want = self.collection.bits if kind == "binary" else self.collection.dim
        have = index.bits if kind == "binary" else index.dim
        if have != want:
            raise ValueError(f"snapshot has width {have}, collection needs {want}")

    def _replay(self, kind: str, catalog: Catalog, seq: int) -> None:
        index = getattr(self, kind)
        name = self.collection.name
        gone = catalog.tombstones_after(name, seq)
        if len(gone):
            index.remove(gone)
        for ids, floats, codes in catalog.iter_segments(name, self.collection.dim, self.collection.bits, after_seq=seq):
            index.remove(ids)  # a row may already be in the snapshot if it was written mid-change
            index.add(ids, codes if kind == "binary" else floats)

    def _rebuild(self, kind: str, catalog: Catalog) -> None:
        index = self._new(kind)
        for ids, floats, codes in catalog.iter_segments(self.collection.name, self.collection.dim, self.collection.bits):
            index.add(ids, codes if kind == "binary" else floats)
        setattr(self, kind, index)
        self.unsnapshotted += 1

    @classmethod
    def build(cls, collection: Collection, catalog: Catalog, shards: int, partition: tuple[int, int] | None = None,
              directory: Path | None = None, auto_windows: int = 0) -> "CollectionIndex":
        """Build from the catalog alone: cluster mode, where the catalog is shared.

        Every API process keeps its own copy and no snapshot files, since a snapshot file in a
        shared data directory would be written by several owners; rebuilding from PostgreSQL is
        the one source all of them agree on. A shard actor is the one owner of its partition and
        passes the ``directory`` its snapshots go to (:meth:`open_partition`). ``auto_windows`` is
        index.auto_ivf_windows, counted against what this index holds (a shard: its partition).
        """
        self = cls(collection, directory or Path("."), shards, partition, auto_windows)
        self.snapshots = directory is not None
        target = catalog.last_seq(collection.name)
        for kind, _ in self.indices():
            setattr(self, kind, self._new(kind))
        for ids, floats, codes in catalog.iter_segments(collection.name, collection.dim, collection.bits, upto_seq=target, shard=partition):
            for kind, index in self.indices():
                index.remove(ids)  # a row deleted and re-added cannot repeat, but replay is idempotent anyway
                index.add(ids, codes if kind == "binary" else floats)
        self.applied_seq = target
        self.unsnapshotted = len(self)
        self.maybe_build()
        return self

    @classmethod
    def open_partition(cls, collection: Collection, catalog: Catalog, directory: Path, shards: int,
                       partition: tuple[int, int], auto_windows: int = 0) -> tuple["CollectionIndex", dict[str, Any]]:
        """A cluster shard's partition from its own snapshots plus the catalog's tail (the writes
        after the snapshot's sequence, this partition's rows only); the whole partition from the
        catalog when there is no usable snapshot. Returns the index and how it was opened.

        A snapshot is unusable when missing or corrupt, when its kinds disagree on the sequence,
        when it is ahead of the catalog (a catalog restored from an older dump), or when the
        partition's row count at the replayed sequence differs from the catalog's.
        """
        self = cls(collection, directory, shards, partition, auto_windows)
        seqs = {self._load(kind) for kind, _ in self.indices()}
        target = catalog.last_seq(collection.name)
        seq = seqs.pop() if len(seqs) == 1 else None
        if seq is not None and seq <= target:
            self.applied_seq = seq
            self.catch_up(catalog, target)  # behind the tombstone horizon, made equal to the catalog in place
            if self._partition_agrees(catalog):
                self.unsnapshotted = int(self.applied_seq > seq)
                return self, {"from": "snapshot", "snapshot_seq": seq, "replayed_to": self.applied_seq}
            log.warning("%s shard %s: snapshot and catalog disagree after replay; rebuilding", collection.name, partition)
        elif seq is not None:
            log.warning("%s shard %s: snapshot at %d is ahead of the catalog (%d); rebuilding", collection.name, partition, seq, target)
        built = cls.build(collection, catalog, shards, partition, directory, auto_windows)
        return built, {"from": "catalog", "snapshot_seq": seq, "replayed_to": built.applied_seq}

    def _partition_agrees(self, catalog: Catalog, attempts: int = 3) -> bool:
        """Row count of the partition equals the catalog's at the applied sequence (read while no write lands)."""
        for _ in range(attempts):
            before = catalog.last_seq(self.collection.name)
            self.catch_up(catalog, before)
            rows = catalog.count_segments(self.collection.name, shard=self.partition)
            if catalog.last_seq(self.collection.name) == before:
                return all(len(index) == rows for _, index in self.indices())
        return True  # writes keep landing: a count cannot be compared; the snapshot passed its checksums

    def catch_up(self, catalog: Catalog, target: int | None = None) -> int:
        """Replay the catalog's changes up to sequence ``target`` (its latest when None); returns the applied sequence.

        Exact because sequence order is commit order per collection (see app.storage.sql_catalog):
        every write numbered at most ``target`` is committed once ``target`` is visible.
        """
        name = self.collection.name
        if target is None:
            target = catalog.last_seq(name)
        with self._write_lock:
            if target <= self.applied_seq:
                return self.applied_seq
            self._replay_range(catalog, self.applied_seq, target)
            self.applied_seq = target
        self.maybe_build()
        return target

    def _replay_range(self, catalog: Catalog, after: int, upto: int) -> None:
        """Replay (after, upto]; rebuild instead when tombstones of that range may have expired."""
        name = self.collection.name
        gone = catalog.tombstones_after(name, after, upto)
        # read after the tombstones: expiry deletes them and moves the horizon in one transaction,
        # so a horizon still at or below `after` here means the tombstones read were complete
        if after < catalog.tombstone_horizon(name):
            log.info("%s: behind the tombstone horizon; rebuilding from the catalog", name)
            self._rebuild_upto(catalog, upto)
            return
        for _, index in self.indices():
            if len(gone):
                index.remove(gone)
        for ids, floats, codes in catalog.iter_segments(name, self.collection.dim, self.collection.bits,
                                                          after_seq=after, upto_seq=upto, shard=self.partition):
            for kind, index in self.indices():
                index.remove(ids)
                index.add(ids, codes if kind == "binary" else floats)

    def _rebuild_upto(self, catalog: Catalog, upto: int) -> None:
        """Make the indices equal the catalog at ``upto``, in place (shared scans hold these objects):
        add the rows they lack, remove the ids the catalog no longer has. A segment id's vectors never
        change, so rows already present are right."""
        c = self.collection
        present = {kind: index.ids() for kind, index in self.indices()}
        seen = []
        for ids, floats, codes in catalog.iter_segments(c.name, c.dim, c.bits, upto_seq=upto, shard=self.partition):
            seen.append(ids)
            for kind, index in self.indices():
                new = ~np.isin(ids, present[kind])
                if new.any():
                    index.add(ids[new], (codes if kind == "binary" else floats)[new])
        everything = np.concatenate(seen) if seen else np.zeros(0, np.int64)
        for kind, index in self.indices():
            stale = np.setdiff1d(present[kind], everything)
            if len(stale):
                index.remove(stale)

    def apply_shared(self, write: WriteResult, catalog: Catalog) -> None:
        """Apply this process's own committed write when the catalog is shared with other writers.

        Other processes may have committed to the collection between our applied sequence and
        this write; then the write alone would skip theirs, so the gap is replayed from the
        catalog instead (it includes this write).
        """
        with self._write_lock:
            if write.seq <= self.applied_seq:
                return  # a catch-up already replayed it
            if catalog.writes_between(self.collection.name, self.applied_seq, write.seq):
                self._replay_range(catalog, self.applied_seq, write.seq)
                self.applied_seq = write.seq
            else:
                self._apply_locked(write)
        self.maybe_build()

    # --- changes --------------------------------------------------------------------------

    def reserve(self, rows: int) -> None:
        """Room for ``rows`` more float rows in mapped files, taken before a catalog write commits: a
        full disk then fails the write (nothing stored) instead of the index update after it.
        Heap indices grow as before."""
        if isinstance(self.float, MappedFloatIndex) and rows > 0:
            self.float.reserve(rows)

    def apply(self, write: WriteResult) -> None:
        """Apply a committed catalog write to every index of the collection."""
        with self._write_lock:
            self._apply_locked(write)
        self.maybe_build()

    def _apply_locked(self, write: WriteResult) -> None:
        removed = np.asarray(write.removed_segment_ids, dtype=np.int64)
        for kind, index in self.indices():
            if len(removed):
                index.remove(removed)
            if len(write.added_segment_ids):
                vectors = write.added_codes if kind == "binary" else write.added_floats
                index.add(write.added_segment_ids, vectors)
        self.applied_seq = max(self.applied_seq, write.seq)
        self.unsnapshotted += len(removed) + len(write.added_segment_ids)

    def snapshot(self, catalog: Catalog | None) -> int:
        """Write every index atomically with the sequence it includes, then prune tombstones; returns that sequence.

        ``catalog`` None (a cluster shard): no pruning, the shared catalog's tombstones serve every
        replica and expire by age (SqlCatalog.expire_tombstones).
        """
        with self._write_lock:
            seq = self.applied_seq
            self.directory.mkdir(parents=True, exist_ok=True)
            for kind, index in self.indices():
                index.save(self._path(kind), seq)
            self.unsnapshotted = 0
        if catalog is not None:
            catalog.prune_tombstones(self.collection.name, seq)
        return seq

    def delete_files(self) -> None:
        if isinstance(self.float, MappedFloatIndex):
            self.float.close()  # frees the mapped files' disk space now, not at garbage collection
        if not self.snapshots:
            return
        for path in [*self.snapshot_paths(), ivf_path(self._path("binary"))]:
            path.unlink(missing_ok=True)

    def memory_bytes(self) -> int:
        """Heap bytes of the indices (mapped float files are counted apart: ``float_file_bytes``)."""
        return sum(index.memory_bytes() for _, index in self.indices())

    def __len__(self) -> int:
        kinds = self.indices()
        return len(kinds[0][1]) if kinds else 0
