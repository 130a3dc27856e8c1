"""Machinery shared by both index kinds: shards, id map, locking, parallel scans, snapshots.

Why own storage rather than ``IndexBinaryIDMap``/``IndexIDMap2``: FAISS' flat indices compact
the whole array on every ``remove_ids`` and cannot hand out a shard as a numpy view, while
here removal is O(removed rows), the live rows of a shard are one contiguous array that the
FAISS kernels (``hammings_knn_hc``, ``knn_inner_product``) scan without a copy, and a snapshot
is a plain dump of those arrays.

Why shards: faiss parallelises a search over queries, not over the database, so one query
uses one core. Splitting the rows into ``shards`` blocks scanned by the calling thread and a small thread
pool (faiss and the numba kernels release the GIL) uses both cores for a single query; the
per-shard top-k lists are then merged. Every scanning thread runs faiss with one OpenMP thread:
our threads are the parallelism, and nested OpenMP teams would only spin.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, ClassVar, Self, TypeVar

import faiss
import numpy as np

from app.index import _idmap
from app.index._idmap import IdMap
from app.index._rwlock import ReadWriteLock
from app.index._shard import Shard
from app.index._snapshot import read_snapshot, write_snapshot
from app.index._validate import as_ids, as_k
from app.index.base import PAD_ID, DuplicateIdError

_T = TypeVar("_T")

# Below this many rows a scan takes microseconds and a thread hand-off would cost more.
PARALLEL_MIN_ROWS = 65536

_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pool_size = 0


_omp_state = threading.local()  # per thread: faiss' OpenMP team is already one thread


def _single_threaded_faiss() -> None:
    faiss.omp_set_num_threads(1)
    _omp_state.single = True


def scan_pool(workers: int) -> ThreadPoolExecutor:
    """The process-wide pool that scans shards (grown on demand, never shrunk).

    One pool for all indices: the machine has a fixed number of cores, and a pool per
    collection would only oversubscribe them.
    """
    global _pool, _pool_size
    with _pool_lock:
        if _pool is None or _pool_size < workers:
            # The old pool is left running, not shut down: a search that already holds it
            # must still be able to submit. Growth happens at most a few times per process.
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="index-scan", initializer=_single_threaded_faiss)
            _pool_size = workers
        return _pool


def _single_threaded(fn: Callable[[Shard], _T], shard: Shard) -> _T:
    """Run a scan on the calling thread with one OpenMP thread, as the pool's threads do.

    Our threads are the parallelism: with faiss' default team of 2, a one-query scan leaves
    the second OpenMP thread spinning, which is ruinous when other work wants the core. The
    setting is per OS thread and every faiss call in this package goes through here or the
    pool, so each thread sets it once and keeps it instead of saving and restoring it around
    every scan: three faiss calls per shard, each of which releases and retakes the GIL (SWIG's
    -threads) while the other shard's scan runs beside it (an audio search, 10^5 windows: 1.3%
    faster, paired).
    """
    if not getattr(_omp_state, "single", False):
        faiss.omp_set_num_threads(1)
        _omp_state.single = True
    return fn(shard)


def _split_evenly(sizes: list[int], m: int) -> list[int]:
    """How many of ``m`` new rows each shard takes so that sizes end up as even as possible."""
    counts = [0] * len(sizes)
    target = -(-(sum(sizes) + m) // len(sizes))  # ceil
    left = m
    for i in sorted(range(len(sizes)), key=lambda i: sizes[i]):
        take = min(left, max(0, target - sizes[i]))
        counts[i] = take
        left -= take
    return counts


class ShardedIndex:
    """Base class; subclasses define the row layout, validation and the per-shard scan.

    Subclasses set ``KIND`` (snapshot code), ``ASCENDING`` (distances vs similarities) and
    ``PAD_VALUE``, and implement ``_check_rows``, ``_check_queries``, ``_scan`` and
    ``_row_layout``.
    """

    KIND: ClassVar[int]
    ASCENDING: ClassVar[bool]
    # Whether one query is worth splitting over threads (see the subclasses for why).
    PARALLEL_SINGLE_QUERY: ClassVar[bool] = True
    PAD_VALUE: ClassVar[Any]
    SCORE_DTYPE: ClassVar[type[np.generic]]

    def __init__(self, width: int, row_width: int, dtype: type[np.generic], shards: int) -> None:
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= _idmap.MAX_SHARDS:
            raise ValueError(f"shards must be an integer in [1, {_idmap.MAX_SHARDS}], got {shards!r}")
        self._width = width
        self._shards = [self._new_shard(row_width, dtype) for _ in range(shards)]
        self._map = IdMap()
        self._lock = ReadWriteLock()
        self.parallel_min_rows = PARALLEL_MIN_ROWS

    # --- hooks ---------------------------------------------------------------------------

    def _check_rows(self, vectors: Any) -> np.ndarray:
        raise NotImplementedError

    def _check_queries(self, queries: Any) -> np.ndarray:
        raise NotImplementedError

    def _scan(self, queries: np.ndarray, data: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k of ``queries`` over one shard's rows: ``(scores, row numbers)``, best first."""
        raise NotImplementedError

    @classmethod
    def _row_layout(cls, width: int) -> tuple[int, np.dtype]:
        raise NotImplementedError

    def _new_shard(self, row_width: int, dtype: type[np.generic]) -> Shard:
        """Storage of one shard's rows: on the heap here; a file mapping for MappedFloatIndex."""
        return Shard(row_width, dtype)

    @classmethod
    def _empty(cls, width: int, shards: int) -> Self:
        return cls(width, shards=shards)  # type: ignore[call-arg]

    # --- writes --------------------------------------------------------------------------

    def add(self, ids: Any, vectors: Any) -> None:
        """Add vectors under new ids. All-or-nothing: on error nothing is added.

        Args:
            ids: ``(n,)`` non-negative integer ids, unique and not yet in the index.
            vectors: ``(n, width)`` rows (see the subclass for dtype and width).

        Raises:
            ValueError: wrong shape/dtype, or ids and vectors of different lengths.
            DuplicateIdError: an id repeats in ``ids`` or is already in the index.
        """
        ids = as_ids(ids)
        rows = self._check_rows(vectors)
        if len(ids) != len(rows):
            raise ValueError(f"got {len(ids)} ids for {len(rows)} vectors")
        if len(ids) == 0:
            return
        unique, counts = np.unique(ids, return_counts=True)
        if len(unique) != len(ids):
            raise DuplicateIdError(f"ids repeat within one add: {unique[counts > 1][:5].tolist()}")
        with self._lock.write():
            found, _ = self._map.lookup(ids)
            if found.any():
                raise DuplicateIdError(f"ids already in the index (remove them first): {ids[found][:5].tolist()}")
            counts_per_shard = _split_evenly([s.size for s in self._shards], len(ids))
            for shard, count in zip(self._shards, counts_per_shard, strict=True):
                shard.reserve(shard.size + count)  # may raise (memory, disk space) before any row moves
            start, locations = 0, np.empty(len(ids), dtype=np.int64)
            for number, (shard, count) in enumerate(zip(self._shards, counts_per_shard, strict=True)):
                if count:
                    part = slice(start, start + count)
                    locations[part] = _idmap.encode(np.int64(number), shard.append(ids[part], rows[part]))
                    start += count
            self._map.insert(ids, locations)

    def reserve(self, m: int) -> None:
        """Make room now for ``m`` more rows, spread as the next ``add`` will spread them.

        For storage that can run out (a mapped file on a full disk): the caller reserves before its
        catalog write commits, so the index add that follows the commit cannot fail for space.
        """
        with self._lock.write():
            counts = _split_evenly([s.size for s in self._shards], int(m))
            for shard, count in zip(self._shards, counts, strict=True):
                shard.reserve(shard.size + count)

    def remove(self, ids: Any) -> int:
        """Remove ids; ids not in the index are ignored.

        Returns:
            How many ids were removed.
        """
        ids = np.unique(as_ids(ids))
        if len(ids) == 0:
            return 0
        with self._lock.write():
            found, locations = self._map.discard(ids)
            shard_numbers, rows = _idmap.decode(locations)
            for number in np.unique(shard_numbers):
                moved_ids, new_rows = self._shards[number].remove_rows(rows[shard_numbers == number])
                self._map.relocate(moved_ids, _idmap.encode(number, new_rows))
            return int(found.sum())

    # --- reads ---------------------------------------------------------------------------

    def search(self, queries: Any, k: int, use_pool: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """k nearest neighbours of each query, scanning shards in parallel.

        Args:
            queries: ``(nq, width)`` rows; batching many queries into one call shares the scan.
            k: neighbours per query (>= 1); may exceed the number of vectors.
            use_pool: False scans every shard on the calling thread (background work that must not take
                the other core from searches).

        Returns:
            ``(scores, ids)``, each ``(nq, k)``, best first (see the subclass for the meaning of
            scores); where fewer than k vectors exist, ids are PAD_ID and scores PAD_VALUE.
        """
        queries = self._check_queries(queries)
        k = as_k(k)
        nq = len(queries)
        scores = np.full((nq, k), self.PAD_VALUE, dtype=self.SCORE_DTYPE)
        labels = np.full((nq, k), PAD_ID, dtype=np.int64)
        if nq == 0:
            return scores, labels
        with self._lock.read():
            live = [s for s in self._shards if s.size]
            total = sum(s.size for s in live)
            if total == 0:
                return scores, labels
            kk = min(k, total)

            def scan(shard: Shard) -> tuple[np.ndarray, np.ndarray]:
                part_scores, rows = self._scan(queries, shard.data, min(kk, shard.size))
                return part_scores, np.where(rows >= 0, shard.ids[np.maximum(rows, 0)], PAD_ID)

            parallel = use_pool and (nq > 1 or self.PARALLEL_SINGLE_QUERY)
            if parallel and len(live) > 1 and total >= self.parallel_min_rows:
                # The calling thread scans the first shard while the pool scans the others:
                # one hand-off fewer than giving every shard to the pool. For a ~1 ms scan the
                # hand-offs cost about as much as the scan (1e6 x 128-bit codes in isolation:
                # median 0.84 ms vs 1.6 ms with both shards on the pool).
                futures = [scan_pool(len(self._shards)).submit(scan, shard) for shard in live[1:]]
                try:
                    first = _single_threaded(scan, live[0])
                finally:
                    rest = [f.result() for f in futures]  # never leave the read lock with scans running
                parts = [first, *rest]
            else:
                parts = [_single_threaded(scan, shard) for shard in live]
        if len(parts) == 1:
            merged_scores, merged_ids = parts[0]
        else:
            all_scores = np.concatenate([p[0] for p in parts], axis=1)
            all_ids = np.concatenate([p[1] for p in parts], axis=1)
            order = np.argsort(all_scores if self.ASCENDING else -all_scores, axis=1, kind="stable")[:, :kk]
            merged_scores = np.take_along_axis(all_scores, order, axis=1)
            merged_ids = np.take_along_axis(all_ids, order, axis=1)
        scores[:, :kk] = merged_scores[:, :kk]
        labels[:, :kk] = merged_ids[:, :kk]
        return scores, labels

    def reconstruct(self, ids: Any) -> np.ndarray:
        """Stored vectors of ``ids``, in the order given (a copy).

        Raises:
            KeyError: some id is not in the index.
        """
        ids = as_ids(ids)
        with self._lock.read():
            found, locations = self._map.lookup(ids)
            if not found.all():
                raise KeyError(f"ids not in the index: {ids[~found][:5].tolist()}")
            return self._gather(locations)

    def reconstruct_present(self, ids: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(ids still indexed, their vectors)``, in the order given, under one read lock.

        For a shortlist from an earlier scan, which a concurrent delete may have thinned: one
        vectorised lookup instead of a locked ``in`` test per id (those cost more than the scan).
        """
        ids = as_ids(ids)
        with self._lock.read():
            found, locations = self._map.lookup(ids)
            return ids[found], self._gather(locations[found])

    def _gather(self, locations: np.ndarray) -> np.ndarray:
        """Rows at id-map locations (the caller holds the read lock)."""
        shard_numbers, rows = _idmap.decode(locations)
        out = np.empty((len(locations), self._shards[0].width), dtype=self._shards[0].dtype)
        # integer positions, not boolean masks: a 4,000-row shortlist over 2 shards gathered in
        # 0.83 ms instead of 1.65 (the masks were built twice and np.unique hashed the numbers)
        for number, shard in enumerate(self._shards):
            positions = np.flatnonzero(shard_numbers == number)
            if len(positions):
                out[positions] = shard.data[rows[positions]]
        return out

    def ids(self) -> np.ndarray:
        """All ids in the index, sorted ascending (a copy)."""
        with self._lock.read():
            return self._map.ids()

    def __contains__(self, item: int) -> bool:
        with self._lock.read():
            return bool(self._map.lookup(np.array([item], dtype=np.int64))[0][0])

    def __len__(self) -> int:
        return len(self._map)

    @property
    def shards(self) -> int:
        """Number of shards scanned in parallel."""
        return len(self._shards)

    def shard_sizes(self) -> list[int]:
        """Rows per shard (for tests and stats)."""
        return [s.size for s in self._shards]

    def memory_bytes(self) -> int:
        """Bytes held: vectors and ids of every shard (with spare capacity) and the id map."""
        with self._lock.read():
            return sum(s.nbytes() for s in self._shards) + self._map.nbytes()

    # --- snapshots -----------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], last_seq: int) -> None:
        """Write a snapshot atomically (temp file, fsync, rename, fsync directory).

        Searches may continue while it is written; writes wait.

        Args:
            path: target file; its directory must exist.
            last_seq: last catalog sequence number whose changes the index includes.
        """
        with self._lock.read():
            write_snapshot(
                path,
                kind=self.KIND,
                width=self._width,
                last_seq=int(last_seq),
                ids=[s.ids for s in self._shards],
                rows=[s.data for s in self._shards],
            )

    @classmethod
    def load(cls, path: str | os.PathLike[str], shards: int = 2) -> tuple[Self, int]:
        """Read a snapshot written by :meth:`save`.

        Args:
            path: the snapshot file.
            shards: shards of the new index (need not match the saved one).

        Returns:
            ``(index, last_seq)``.

        Raises:
            SnapshotError: missing, truncated, corrupt, of another kind, or inconsistent.
        """
        from app.index.base import SnapshotError

        snap = read_snapshot(path, kind=cls.KIND, row_layout=cls._row_layout)
        index = cls._empty(snap.width, shards)
        try:
            index.add(snap.ids, snap.rows)
        except ValueError as exc:  # duplicate or negative ids survive a checksum only if written so
            raise SnapshotError(f"{path}: inconsistent snapshot: {exc}") from exc
        return index, snap.last_seq
