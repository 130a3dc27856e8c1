"""Binary codes in a FAISS ``IndexBinaryIVF``: a query scans the nprobe lists nearest to it.

This is a search structure beside the flat index of the same codes (see
:mod:`app.index.adaptive`), never the store of record: the flat index and the catalog hold every
code, so an IVF that cannot be trusted is simply rebuilt from them.

Why no direct map (``make_direct_map``): FAISS' hash-table map costs ~50 bytes per code (more than
a 256-bit code) to make ``remove_ids`` O(removed). Without it a removal scans the ids of every
list (8 bytes per code; removing 100 ids from 10^6 codes took 3 ms, and 19 ms on a busy machine:
bench/results/index_kinds.json), and the caller passes only ids it knows are present, so replays
and upserts of new ids never pay it.

List balance: real codes crowd a few regions, and FAISS' binary k-means leaves duplicated centroids there
(the sign of several float centroids is one code), so one list took every code of the crowd. Training refines
the centroids until all are distinct (:func:`refine_centroids`) and adding caps each list's length
(:func:`capped_assignment`): the largest list at 10^6 real-audio codes went from 78x to 13x the median, and the
99th-percentile query scans ~19% fewer codes at the same recall (bench/results/ivf_balance.json).
"""

from __future__ import annotations

import hashlib
import math
import os
import struct
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from app.index._rwlock import ReadWriteLock
from app.index._snapshot import write_atomically
from app.index._validate import as_ids, as_k, as_rows
from app.index.base import PAD_ID, SnapshotError
from app.index.binary_index import HAMMING_PAD
from app.index.kinds import MIN_POINTS_PER_LIST, default_nprobe

# k-means on at most this many codes per list (a random sample): FAISS' default of 256 would make
# training 4096 lists read a million codes for each of its 10 iterations, four times the cost of this.
# The recalls in bench/results/index_kinds.json were measured with this sample size; 256 per list was measured
# in bench/results/ivf_balance.json (FAISS' centroids: a little more even, not more accurate per code scanned).
TRAIN_POINTS_PER_LIST = 64
# Lloyd rounds of the Hamming k-majority refinement after FAISS' k-means (see :func:`refine_centroids`).
REFINE_ROUNDS = 10
# A list holds at most LIST_CAP times the mean list size; a code past that goes to the nearest of its
# CAP_CHOICES nearest lists with room (see :func:`capped_assignment`). None: no cap. Chosen by
# bench/index/ivf_balance.py (10^6 real-audio codes, 1024 lists, one run): refined centroids with lists capped
# at 2x the mean scanned the fewest codes at the 99th percentile query for the same recall@10 (see the README's
# "IVF list balance").
LIST_CAP: float | None = 2.0
CAP_CHOICES = 4
_ADD_CHUNK = 1 << 20
_MAGIC = b"RECALLIV"
_VERSION = 1
_HEADER = struct.Struct("<8sIIIqqq")  # magic, version, bits, nlist, last_seq, count, payload bytes


def _on_one_omp_thread(search: Any) -> Any:
    """Run one query's FAISS search with an OpenMP team of one on this thread, then restore the team size.

    FAISS splits an IVF search over its queries; with one query the team's other threads have nothing to do
    but wait at the barrier, spinning, which on a busy machine waits out other jobs' time slices:
    bench/results/scale.json (load 6-14) timed single queries at 10^8 windows, nprobe 12, at p50 14.0 ms /
    p99 54 ms with FAISS' default team of 2 against 1.9 / 7.6 ms with one thread (10^7: p99 34 against 0.5
    ms). The flat scans already run on one OpenMP thread (app/index/_sharded.py); a batch of queries (the
    shared scan under load) keeps the default team, which splits the queries between its threads.
    """
    before = faiss.omp_get_max_threads()
    if before == 1:
        return search()
    faiss.omp_set_num_threads(1)  # per OS thread: other threads' searches keep their own setting
    try:
        return search()
    finally:
        faiss.omp_set_num_threads(before)


class BinaryIVF:
    """An inverted-file Hamming index with stable int64 ids (thread-safe: searches share, writes exclude).

    Build with :meth:`train`, then :meth:`add`. ``search(queries, k, nprobe)`` returns
    ``(int32 distances ascending, ids)``, padded with ``(HAMMING_PAD, PAD_ID)`` when the probed
    lists hold fewer than k codes.
    """

    def __init__(self, index: Any, nprobe: int | None = None, trained_on: int = 0) -> None:
        self._index = index
        self.bits = int(index.d)
        self.code_bytes = self.bits // 8
        self.nlist = int(index.nlist)
        self.nprobe = int(nprobe or default_nprobe(self.nlist, max(trained_on, int(index.ntotal))))
        self.trained_on = trained_on  # codes the centroids were fitted to (retraining policy)
        self.list_cap = LIST_CAP
        self._lock = ReadWriteLock()
        self._sizes = self._count_lists()  # codes per list, kept current by every write (the cap reads it)

    @classmethod
    def train(cls, codes: np.ndarray, nlist: int, nprobe: int | None = None, seed: int = 1234,
              refine: bool = True, points_per_list: int = TRAIN_POINTS_PER_LIST) -> "BinaryIVF":
        """Fit ``nlist`` centroids to (a sample of) ``codes``; the index starts empty.

        ``refine`` (the default) follows FAISS' k-means with :func:`refine_centroids`, which gives every list
        a distinct centroid (``refine=False``: FAISS' centroids as they come, kept for the bench's A/B).
        """
        if not isinstance(codes, np.ndarray) or codes.ndim != 2 or codes.dtype != np.uint8 or codes.shape[1] == 0:
            raise ValueError("codes must be a 2-D uint8 array of packed codes")
        codes = np.ascontiguousarray(codes)
        bits = codes.shape[1] * 8
        if len(codes) < MIN_POINTS_PER_LIST * nlist:
            raise ValueError(f"{len(codes)} codes cannot train {nlist} lists (need {MIN_POINTS_PER_LIST} per list)")
        quantizer = faiss.IndexBinaryFlat(bits)
        index = faiss.IndexBinaryIVF(quantizer, bits, nlist)  # the wrapper keeps the quantizer alive
        index.cp.max_points_per_centroid = points_per_list
        index.cp.seed = seed
        sample = codes
        if len(codes) > points_per_list * nlist:  # sample here: one copy of the sample, not of all codes
            rows = np.random.default_rng(seed).choice(len(codes), points_per_list * nlist, replace=False)
            sample = codes[np.sort(rows)]
        index.train(sample)
        if refine:
            quantizer = faiss.downcast_IndexBinary(index.quantizer)
            centroids = faiss.vector_to_array(quantizer.xb).reshape(nlist, bits // 8)
            quantizer.reset()
            quantizer.add(refine_centroids(sample, centroids, seed=seed))
        return cls(index, nprobe, trained_on=len(codes))

    # --- writes --------------------------------------------------------------------------

    def add(self, ids: Any, codes: Any) -> None:
        """Add codes under ids the caller knows are absent (the flat index checks duplicates)."""
        ids = as_ids(ids)
        codes = as_rows(codes, width=self.code_bytes, dtype=np.dtype(np.uint8), what="codes", unit="bytes")
        if len(ids) != len(codes):
            raise ValueError(f"got {len(ids)} ids for {len(codes)} codes")
        total = len(self) + len(ids)
        for start in range(0, len(ids), _ADD_CHUNK):  # bounded temporaries: a build adds every code at once
            self._add_chunk(ids[start : start + _ADD_CHUNK], codes[start : start + _ADD_CHUNK], total)

    def _add_chunk(self, ids: np.ndarray, codes: np.ndarray, total: int) -> None:
        choices = 1 if self.list_cap is None else min(CAP_CHOICES, self.nlist)
        distances, nearest = self._index.quantizer.search(codes, choices)  # outside the lock: read-only centroids
        with self._lock.write():
            if self.list_cap is None:
                lists = np.ascontiguousarray(nearest[:, 0])
            else:
                cap = math.ceil(self.list_cap * max(total, self.trained_on) / self.nlist)
                lists = capped_assignment(nearest, distances, self._sizes, cap)
            self._index.add_core(len(ids), faiss.swig_ptr(codes), faiss.swig_ptr(ids), faiss.swig_ptr(lists))
            self._sizes += np.bincount(lists, minlength=self.nlist)

    def remove(self, ids: Any) -> int:
        """Remove ids (absent ones are ignored); returns how many were removed."""
        ids = np.unique(as_ids(ids))
        if len(ids) == 0:
            return 0
        with self._lock.write():
            removed = int(self._index.remove_ids(faiss.IDSelectorBatch(ids)))
            if removed:
                self._sizes = self._count_lists()
            return removed

    # --- reads ---------------------------------------------------------------------------

    def search(self, queries: Any, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        queries = as_rows(queries, width=self.code_bytes, dtype=np.dtype(np.uint8), what="query codes", unit="bytes")
        k = as_k(k)
        probe = min(self.nlist, int(nprobe or self.nprobe))
        params = faiss.SearchParametersIVF(nprobe=probe)
        if len(queries) == 0:
            return np.full((0, k), HAMMING_PAD, np.int32), np.full((0, k), PAD_ID, np.int64)
        with self._lock.read():
            if len(queries) == 1:
                distances, labels = _on_one_omp_thread(lambda: self._index.search(queries, k, params=params))
            else:
                distances, labels = self._index.search(queries, k, params=params)
        distances[labels < 0] = HAMMING_PAD
        return distances.astype(np.int32, copy=False), labels

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def list_sizes(self) -> np.ndarray:
        with self._lock.read():
            return self._sizes.copy()

    def _count_lists(self) -> np.ndarray:
        invlists = self._index.invlists
        return np.fromiter((invlists.list_size(i) for i in range(self.nlist)), np.int64, self.nlist)

    def memory_bytes(self) -> int:
        """Codes and ids in the lists, plus the centroids."""
        return len(self) * (self.code_bytes + 8) + self.nlist * self.code_bytes

    def describe(self) -> dict[str, Any]:
        return {"nlist": self.nlist, "nprobe": self.nprobe, "trained_on": self.trained_on}

    # --- snapshots -----------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str], last_seq: int) -> None:
        """Write FAISS' own serialisation in a checksummed envelope, atomically (temp, fsync, rename)."""
        path = Path(path)
        with self._lock.read():
            payload = faiss.serialize_index_binary(self._index)
        head = _HEADER.pack(_MAGIC, _VERSION, self.bits, self.nlist, int(last_seq), len(self), len(payload))
        meta = struct.pack("<qq", self.nprobe, self.trained_on)
        digest = hashlib.sha256(head + meta)
        digest.update(memoryview(payload))

        def write(f: Any) -> None:
            for part in (head, meta, memoryview(payload), digest.digest()):
                f.write(part)

        write_atomically(path, write)

    @classmethod
    def load(cls, path: str | os.PathLike[str], bits: int) -> tuple["BinaryIVF", int]:
        """Read a snapshot; returns ``(index, last_seq)``; SnapshotError if it cannot be trusted."""
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError as exc:
            raise SnapshotError(f"{path}: no snapshot") from exc
        except OSError as exc:
            raise SnapshotError(f"{path}: cannot read snapshot: {exc}") from exc
        body_start = _HEADER.size + 16
        if len(data) < body_start + 32:
            raise SnapshotError(f"{path}: truncated")
        magic, version, got_bits, nlist, last_seq, count, nbytes = _HEADER.unpack_from(data)
        if magic != _MAGIC or version != _VERSION:
            raise SnapshotError(f"{path}: not an IVF snapshot of this version")
        if got_bits != bits:
            raise SnapshotError(f"{path}: {got_bits}-bit codes, the collection has {bits}")
        if len(data) != body_start + nbytes + 32:
            raise SnapshotError(f"{path}: size {len(data)} bytes, expected {body_start + nbytes + 32} (truncated?)")
        if hashlib.sha256(memoryview(data)[: body_start + nbytes]).digest() != data[body_start + nbytes :]:
            raise SnapshotError(f"{path}: checksum mismatch (corrupt snapshot)")
        nprobe, trained_on = struct.unpack_from("<qq", data, _HEADER.size)
        payload = np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=body_start)
        try:
            index = faiss.deserialize_index_binary(payload)  # already downcast; owns its memory
        except RuntimeError as exc:
            raise SnapshotError(f"{path}: FAISS cannot read it: {exc}") from exc
        if not isinstance(index, faiss.IndexBinaryIVF) or index.nlist != nlist or index.ntotal != count:
            raise SnapshotError(f"{path}: inconsistent IVF snapshot")
        return cls(index, int(nprobe), int(trained_on)), int(last_seq)


def refine_centroids(sample: np.ndarray, centroids: np.ndarray, rounds: int = REFINE_ROUNDS, seed: int = 1234) -> np.ndarray:
    """Hamming k-majority rounds that leave no two lists with the same centroid and no list empty.

    Why: FAISS trains binary centroids as float k-means on the bits, then takes each centroid's sign. Where
    codes crowd (real audio: one keyword's windows from many speakers), k-means puts several float centroids
    and the sign collapses them into one code: at 10^6 real-audio codes and 1024 lists only 864 centroids
    were distinct, 160 lists stayed empty, and every code equidistant from 4-5 identical centroids went to
    the first of them (ties go to the lowest list), so the largest list held 72x the median
    (bench/results/ivf_balance.json). Here each round assigns the sample to its nearest centroid, moves each
    centroid to its members' bitwise majority, and gives every empty or duplicated list half of one of the
    then-largest lists, splitting crowded regions across distinct centroids.
    """
    rng = np.random.default_rng(seed)
    nlist, width = centroids.shape
    bits = np.unpackbits(sample, axis=1, bitorder="little")  # (n, 8 * width) 0/1
    centroids = centroids.copy()
    for _ in range(rounds):
        flat = faiss.IndexBinaryFlat(width * 8)
        flat.add(centroids)
        distances, labels = flat.search(sample, 1)
        labels, distances = labels[:, 0], distances[:, 0]
        counts = np.bincount(labels, minlength=nlist)
        order = np.argsort(labels, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        ones = np.zeros((nlist, bits.shape[1]), np.int64)
        filled = counts > 0
        ones[filled] = np.add.reduceat(bits[order], starts[filled], axis=0, dtype=np.int64)
        majority = np.where(2 * ones == counts[:, None], np.unpackbits(centroids, axis=1, bitorder="little"),
                            2 * ones > counts[:, None]).astype(np.uint8)
        centroids = np.packbits(majority, axis=1, bitorder="little")
        _, first = np.unique(centroids, axis=0, return_index=True)
        vacant = np.setdiff1d(np.arange(nlist), first[counts[first] > 0])
        if len(vacant) == 0:
            continue
        # split the largest lists in two on their most evenly divided bit: each half's majority becomes a
        # centroid (the halves' centroids differ in that bit, so the next assignment keeps them apart; a member
        # of a crowd is no nearer to another member than to the crowd's majority, so seeding a new list with
        # one member, as k-means does, captures almost nothing)
        donors = np.argsort(-counts, kind="stable")[: len(vacant)]
        for slot, donor in zip(vacant, donors):
            members = np.flatnonzero(labels == donor)
            if len(members) < 2:
                centroids[slot] = sample[rng.integers(len(sample))]
                continue
            member_bits = bits[members]
            split = int(np.argmin(np.abs(member_bits.mean(axis=0) - 0.5)))
            upper = member_bits[:, split] == 1
            for target, half in ((donor, member_bits[~upper]), (slot, member_bits[upper])):
                centroids[target] = np.packbits(2 * half.sum(axis=0) >= len(half), bitorder="little")
    return centroids


def capped_assignment(nearest: np.ndarray, distances: np.ndarray, sizes: np.ndarray, cap: int) -> np.ndarray:
    """Lists for new codes: each code's nearest list with room under ``cap``, else its nearest list.

    ``nearest``/``distances``: each code's nearest lists, best first (the coarse quantizer's answer). Codes
    claim places nearest-first: at each rank, the codes closest to a list's centroid take its remaining room,
    and the rest try their next list. A code that finds every one of its choices full goes to its nearest list
    (the cap bounds the overflow, not recall). A query finds a moved code as long as it probes that code's
    second (third...) nearest list, which nprobe of 8 or more usually does (recall measured in
    bench/results/ivf_balance.json).
    """
    n = len(nearest)
    room = np.maximum(cap - sizes, 0)
    lists = np.full(n, -1, np.int64)
    for rank in range(nearest.shape[1]):
        pending = np.flatnonzero(lists < 0)
        if len(pending) == 0:
            break
        wanted, how_far = nearest[pending, rank], distances[pending, rank]
        usable = wanted >= 0
        pending, wanted, how_far = pending[usable], wanted[usable], how_far[usable]
        order = np.lexsort((how_far, wanted))  # by list, nearest first inside each list
        pending, wanted = pending[order], wanted[order]
        first = np.searchsorted(wanted, wanted, side="left")  # where each code's list starts in the order
        place = np.arange(len(wanted)) - first
        taken = place < room[wanted]
        lists[pending[taken]] = wanted[taken]
        room -= np.bincount(wanted[taken], minlength=len(room))
    left = lists < 0
    lists[left] = nearest[left, 0]
    return lists
