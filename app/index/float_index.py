"""Unit-norm float vectors searched by inner product (cosine similarity)."""

from __future__ import annotations

from typing import Any, ClassVar

import faiss
import numpy as np

from app.index._sharded import ShardedIndex
from app.index._validate import as_ids, as_rows

NORM_TOLERANCE = 1e-3
"""How far from 1 a stored vector's L2 norm may be (float32 rounding after normalising)."""


class FloatIndex(ShardedIndex):
    """Exact inner-product k-NN over L2-normalised float32 vectors, with stable int64 ids.

    :meth:`search` returns ``(similarities, ids)``: float32 inner products (cosine, in
    ``[-1, 1]`` for unit vectors), sorted **descending** (larger is better). Padding is
    ``(-inf, PAD_ID)``. Use :func:`cosine_distance` for a smaller-is-better value.

    Args:
        dim: vector dimension.
        shards: blocks scanned in parallel threads.
        check_norm: reject added vectors whose norm is not 1 (within NORM_TOLERANCE);
            un-normalised vectors would silently skew every similarity.
    """

    KIND: ClassVar[int] = 2
    ASCENDING: ClassVar[bool] = False
    # One float query is memory-bound; one thread reads ~28 GB/s here, two ~43 GB/s when the
    # second core is free (measured 14 vs 23 ms at 1e6 x 128-d), so single queries split too.
    PARALLEL_SINGLE_QUERY: ClassVar[bool] = True
    PAD_VALUE: ClassVar[Any] = -np.inf
    SCORE_DTYPE: ClassVar[type[np.generic]] = np.float32

    def __init__(self, dim: int, shards: int = 2, check_norm: bool = True) -> None:
        self._row_layout(dim)
        super().__init__(dim, dim, np.float32, shards)
        self.dim = dim
        self.check_norm = check_norm

    @classmethod
    def _row_layout(cls, width: int) -> tuple[int, np.dtype]:
        if isinstance(width, bool) or not isinstance(width, (int, np.integer)) or width <= 0:
            raise ValueError(f"dim must be a positive integer, got {width!r}")
        return int(width), np.dtype(np.float32)

    def _check_rows(self, vectors: Any) -> np.ndarray:
        rows = as_rows(vectors, width=self.dim, dtype=np.dtype(np.float32), what="vectors", unit="dimensions")
        if not np.isfinite(rows).all():
            raise ValueError("vectors contain NaN or infinity")
        if self.check_norm and len(rows):
            norms = np.linalg.norm(rows, axis=1)
            bad = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
            if len(bad):
                raise ValueError(f"vectors must be L2-normalised; row {bad[0]} has norm {norms[bad[0]]:.4f}")
        return rows

    def _check_queries(self, queries: Any) -> np.ndarray:
        rows = as_rows(queries, width=self.dim, dtype=np.dtype(np.float32), what="queries", unit="dimensions")
        if not np.isfinite(rows).all():
            raise ValueError("queries contain NaN or infinity")
        return rows

    def _scan(self, queries: np.ndarray, data: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return knn_inner_product(queries, data, k)

    @classmethod
    def _empty(cls, width: int, shards: int) -> FloatIndex:
        # Snapshot rows were checked when first added; re-checking norms on load is wasted work.
        return cls(width, shards=shards, check_norm=False)

    def score(self, query: Any, ids: Any) -> np.ndarray:
        """Exact similarities of one query to the given ids (for two-stage re-ranking).

        Args:
            query: ``(dim,)`` float32 vector.
            ids: ids to score, e.g. a Hamming shortlist (PAD_ID entries are not allowed).

        Returns:
            float32 ``(len(ids),)`` inner products, in the order of ``ids``.

        Raises:
            KeyError: some id is not in the index.
            ValueError: wrong query shape or dtype.
        """
        if not isinstance(query, np.ndarray) or query.ndim != 1:
            raise ValueError(f"query must be a 1-D array of {self.dim} float32, got {getattr(query, 'shape', type(query))}")
        query = self._check_queries(query[None])[0]
        return self.reconstruct(as_ids(ids)) @ query


def cosine_distance(similarities: np.ndarray) -> np.ndarray:
    """``1 - similarity``, clipped to ``[0, 2]``; smaller is better.

    Clipped because float32 rounding puts a unit vector's similarity with itself a hair above 1,
    which would show users a distance of -3e-7 and a score above 1. Every float search path
    (float mode, two-stage re-ranking, occurrences) converts through this one function.
    """
    return np.clip(1.0 - similarities, 0.0, 2.0).astype(np.float32)


# faiss picks its BLAS path only when nq * dim >= this global (default 128000, i.e. ~1000
# queries at 128-d); below it, every query re-scans the database. A shared scan of 16 queries
# is 3-4x faster through BLAS, so batches always take it; single queries use our own scan
# (_knn_single), so the threshold never has to depend on the dimension.
_BLAS_THRESHOLD = 1
# Rows per block of the single-query scan: 8 MB of 128-d rows, scores stay in L1/L2.
_SINGLE_BLOCK_ROWS = 16384


def knn_inner_product(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product top-k: BLAS for batches, a streaming SIMD scan for one query.

    Returns:
        ``(similarities float32, rows int64)``, each ``(nq, k)``, descending.
    """
    nq, dim = queries.shape
    if nq == 1:
        return _knn_single(queries, database, k)
    if faiss.cvar.distance_compute_blas_threshold != _BLAS_THRESHOLD:
        faiss.cvar.distance_compute_blas_threshold = _BLAS_THRESHOLD
    D = np.empty((nq, k), dtype=np.float32)
    I = np.empty((nq, k), dtype=np.int64)
    faiss.knn_inner_product(
        faiss.swig_ptr(queries), faiss.swig_ptr(database), dim, nq, len(database), k, faiss.swig_ptr(D), faiss.swig_ptr(I)
    )
    return D, I


def _knn_single(query: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """One query: SIMD dot products block by block, kept in a faiss min-heap of the k best."""
    dim = query.shape[1]
    D = np.empty((1, k), dtype=np.float32)
    I = np.empty((1, k), dtype=np.int64)
    heap = faiss.float_minheap_array_t()
    heap.k, heap.nh = k, 1
    heap.val, heap.ids = faiss.swig_ptr(D), faiss.swig_ptr(I)
    heap.heapify()
    scores = np.empty(min(_SINGLE_BLOCK_ROWS, len(database)), dtype=np.float32)
    query_ptr, scores_ptr = faiss.swig_ptr(query), faiss.swig_ptr(scores)
    for start in range(0, len(database), _SINGLE_BLOCK_ROWS):
        rows = min(_SINGLE_BLOCK_ROWS, len(database) - start)
        faiss.fvec_inner_products_ny(scores_ptr, query_ptr, faiss.swig_ptr(database[start : start + rows]), dim, rows)
        heap.addn(rows, scores_ptr, start, 0, 1)
    heap.reorder()
    return D, I
