"""Binary codes in a FAISS ``IndexBinaryIVF``: a query scans the nprobe lists nearest to it.

This is a search structure beside the flat index of the same codes (see
:mod:`app.index.adaptive`), never the store of record: the flat index and the catalog hold every
code, so an IVF that cannot be trusted is simply rebuilt from them.

Why no direct map (``make_direct_map``): FAISS' hash-table map costs ~50 bytes per code (more than
a 256-bit code) to make ``remove_ids`` O(removed). Without it a removal scans the ids of every
list (8 bytes per code; removing 100 ids from 10^6 codes took 3 ms, and 19 ms on a busy machine:
bench/results/index_kinds.json), and the caller passes only ids it knows are present, so replays
and upserts of new ids never pay it.
"""

from __future__ import annotations

import hashlib
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
# The recalls in bench/results/index_kinds.json were measured with this sample size (the effect of a
# larger sample was not measured).
TRAIN_POINTS_PER_LIST = 64
_MAGIC = b"RECALLIV"
_VERSION = 1
_HEADER = struct.Struct("<8sIIIqqq")  # magic, version, bits, nlist, last_seq, count, payload bytes


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
        self._lock = ReadWriteLock()

    @classmethod
    def train(cls, codes: np.ndarray, nlist: int, nprobe: int | None = None, seed: int = 1234) -> "BinaryIVF":
        """Fit ``nlist`` centroids to (a sample of) ``codes``; the index starts empty."""
        if not isinstance(codes, np.ndarray) or codes.ndim != 2 or codes.dtype != np.uint8 or codes.shape[1] == 0:
            raise ValueError("codes must be a 2-D uint8 array of packed codes")
        codes = np.ascontiguousarray(codes)
        bits = codes.shape[1] * 8
        if len(codes) < MIN_POINTS_PER_LIST * nlist:
            raise ValueError(f"{len(codes)} codes cannot train {nlist} lists (need {MIN_POINTS_PER_LIST} per list)")
        quantizer = faiss.IndexBinaryFlat(bits)
        index = faiss.IndexBinaryIVF(quantizer, bits, nlist)  # the wrapper keeps the quantizer alive
        index.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
        index.cp.seed = seed
        sample = codes
        if len(codes) > TRAIN_POINTS_PER_LIST * nlist:  # sample here: one copy of the sample, not of all codes
            rows = np.random.default_rng(seed).choice(len(codes), TRAIN_POINTS_PER_LIST * nlist, replace=False)
            sample = codes[np.sort(rows)]
        index.train(sample)
        return cls(index, nprobe, trained_on=len(codes))

    # --- writes --------------------------------------------------------------------------

    def add(self, ids: Any, codes: Any) -> None:
        """Add codes under ids the caller knows are absent (the flat index checks duplicates)."""
        ids = as_ids(ids)
        codes = as_rows(codes, width=self.code_bytes, dtype=np.dtype(np.uint8), what="codes", unit="bytes")
        if len(ids) != len(codes):
            raise ValueError(f"got {len(ids)} ids for {len(codes)} codes")
        if len(ids):
            with self._lock.write():
                self._index.add_with_ids(codes, ids)

    def remove(self, ids: Any) -> int:
        """Remove ids (absent ones are ignored); returns how many were removed."""
        ids = np.unique(as_ids(ids))
        if len(ids) == 0:
            return 0
        with self._lock.write():
            return int(self._index.remove_ids(faiss.IDSelectorBatch(ids)))

    # --- reads ---------------------------------------------------------------------------

    def search(self, queries: Any, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        queries = as_rows(queries, width=self.code_bytes, dtype=np.dtype(np.uint8), what="query codes", unit="bytes")
        k = as_k(k)
        probe = min(self.nlist, int(nprobe or self.nprobe))
        params = faiss.SearchParametersIVF(nprobe=probe)
        if len(queries) == 0:
            return np.full((0, k), HAMMING_PAD, np.int32), np.full((0, k), PAD_ID, np.int64)
        with self._lock.read():
            distances, labels = self._index.search(queries, k, params=params)
        distances[labels < 0] = HAMMING_PAD
        return distances.astype(np.int32, copy=False), labels

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def list_sizes(self) -> np.ndarray:
        with self._lock.read():
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

