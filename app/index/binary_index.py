"""Binary codes searched by Hamming distance (FAISS kernels over sharded numpy storage)."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from app.index.hamming.topk import knn_hamming
from app.index._sharded import ShardedIndex
from app.index._validate import as_rows

HAMMING_PAD = np.iinfo(np.int32).max
"""Distance reported next to a PAD_ID (the value FAISS uses for an empty heap slot)."""


class BinaryIndex(ShardedIndex):
    """Hamming k-NN over packed binary codes, with stable int64 ids.

    Codes are ``uint8`` arrays of shape ``(n, bits // 8)`` packed in FAISS bit order, i.e.
    ``np.packbits(bits, axis=1, bitorder="little")``. :meth:`search` returns
    ``(distances, ids)``: int32 Hamming distances in ``[0, bits]``, sorted ascending (smaller is
    better); ties come in no particular order. Padding is ``(HAMMING_PAD, PAD_ID)``.

    Args:
        bits: code length, a positive multiple of 8.
        shards: blocks scanned in parallel threads; one per core saturates memory bandwidth.
    """

    KIND: ClassVar[int] = 1
    ASCENDING: ClassVar[bool] = True
    PAD_VALUE: ClassVar[Any] = HAMMING_PAD
    SCORE_DTYPE: ClassVar[type[np.generic]] = np.int32
    # One core's scan of codes streamed from memory runs near one core's bandwidth; two threads
    # on two shards reach the two-core bandwidth, so even a single query is split.
    PARALLEL_SINGLE_QUERY: ClassVar[bool] = True

    def __init__(self, bits: int, shards: int = 2) -> None:
        self._row_layout(bits)
        super().__init__(bits, bits // 8, np.uint8, shards)
        self.bits = bits
        self.code_bytes = bits // 8

    @classmethod
    def _row_layout(cls, width: int) -> tuple[int, np.dtype]:
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0 or width % 8:
            raise ValueError(f"bits must be a positive multiple of 8, got {width!r}")
        return int(width) // 8, np.dtype(np.uint8)

    def _check_rows(self, vectors: Any) -> np.ndarray:
        return as_rows(vectors, width=self.code_bytes, dtype=np.dtype(np.uint8), what="codes", unit="bytes")

    def _check_queries(self, queries: Any) -> np.ndarray:
        return as_rows(queries, width=self.code_bytes, dtype=np.dtype(np.uint8), what="query codes", unit="bytes")

    def _scan(self, queries: np.ndarray, data: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return knn_hamming(queries, data, k)

