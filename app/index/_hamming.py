"""Exact Hamming top-k kernels on packed codes, built on FAISS' C++ routines.

Two kernels, picked by batch size:

* one query: ``faiss.hammings_knn_hc``, a heap scan. Per code it costs about as much as
  streaming the code from memory, so with one shard per core it runs at memory bandwidth.
* two or more queries ("shared scan"): the heap scan is compute-bound at ~1 ns per
  (query, code) pair (scalar popcounts and a heap test per pair), so 16 queries cost almost
  16 scans. Instead the database is cut into cache-sized blocks; for each block
  ``faiss.hammings`` (SIMD popcount, ~0.35 ns per pair) writes the full ``(nq, block)``
  distance matrix into a reused buffer; a per-row minimum shows which queries the block can
  improve at all, and only those rows go through faiss' heap insertion.

Both are exact; ties at the k-th distance may be broken differently.
"""

from __future__ import annotations

import faiss
import numpy as np

# With one query the heap scan is already at memory speed; from two on the shared scan wins.
BATCHED_MIN_QUERIES = 2
# Pairs per block of the batched kernel: a 512 KB int32 (nq, block) matrix stays in L2 while
# the next block's codes stream in. Block rows are clamped so that per-block Python overhead
# (~10 us) stays small next to the per-block SIMD work. Measured best: 8-16 K rows.
BLOCK_PAIRS = 1 << 17
MIN_BLOCK_ROWS = 1 << 13
MAX_BLOCK_ROWS = 1 << 14
# Queries per pass of the shared scan: bounds the distance buffer (256 x 8 K x 4 B = 8 MB)
# when a long recording is windowed into hundreds of query codes.
MAX_BATCH_QUERIES = 256


def knn_hamming(
    queries: np.ndarray, database: np.ndarray, k: int, *, block_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Hamming k-NN of packed uint8 codes.

    Args:
        queries: ``(nq, nbytes)`` uint8, C-contiguous.
        database: ``(n, nbytes)`` uint8, C-contiguous.
        k: neighbours per query.
        block_rows: database rows per block of the batched kernel (tests use small blocks
            to cross block boundaries on small data); default from BLOCK_PAIRS.

    Returns:
        ``(distances int32, rows int64)``, each ``(nq, k)``, ascending; when ``k > n`` the
        tail is padded with ``(int32 max, -1)``.
    """
    nq, nbytes = queries.shape
    if nq < BATCHED_MIN_QUERIES or nbytes % 8:  # faiss.hammings needs whole 64-bit words
        return knn_hamming_heap(queries, database, k)
    if nq > MAX_BATCH_QUERIES:
        parts = [
            knn_hamming(queries[start : start + MAX_BATCH_QUERIES], database, k, block_rows=block_rows)
            for start in range(0, nq, MAX_BATCH_QUERIES)
        ]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    if block_rows is None:
        block_rows = min(MAX_BLOCK_ROWS, max(MIN_BLOCK_ROWS, BLOCK_PAIRS // nq))
    return knn_hamming_batched(queries, database, k, block_rows)


def knn_hamming_heap(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS' heap scan (``hammings_knn_hc``), cache-blocked over the database."""
    nq, nbytes = queries.shape
    D = np.empty((nq, k), dtype=np.int32)
    I = np.empty((nq, k), dtype=np.int64)
    heap = faiss.int_maxheap_array_t()
    heap.k, heap.nh = k, nq
    heap.val, heap.ids = faiss.swig_ptr(D), faiss.swig_ptr(I)
    faiss.hammings_knn_hc(heap, faiss.swig_ptr(queries), faiss.swig_ptr(database), len(database), nbytes, 1)
    return D, I


def knn_hamming_batched(
    queries: np.ndarray, database: np.ndarray, k: int, block_rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """Shared-scan kernel for several queries; requires nbytes % 8 == 0."""
    nq, nbytes = queries.shape
    n = len(database)
    D = np.empty((nq, k), dtype=np.int32)
    I = np.empty((nq, k), dtype=np.int64)
    heap = faiss.int_maxheap_array_t()
    heap.k, heap.nh = k, nq
    heap.val, heap.ids = faiss.swig_ptr(D), faiss.swig_ptr(I)
    heap.heapify()
    # Each query's heap root is its current k-th best distance: a view that the heap updates.
    worst = D[:, 0]
    buffer = np.empty(nq * min(block_rows, n), dtype=np.int32)
    query_ptr = faiss.swig_ptr(queries)
    for start in range(0, n, block_rows):
        width = min(block_rows, n - start)
        block = buffer[: nq * width].reshape(nq, width)
        faiss.hammings(query_ptr, faiss.swig_ptr(database[start : start + width]), nq, width, nbytes, faiss.swig_ptr(block))
        # A query beats its k-th best only ~k * ln(n / block) times in a whole scan, so one
        # SIMD pass of row minima usually shows the block changes nothing; rows that do
        # change go through faiss' heap insertion (strict "<", so later ties are skipped).
        rows = np.flatnonzero(block.min(axis=1) < worst)
        if len(rows) == nq:
            heap.addn(width, faiss.swig_ptr(block), start, 0, nq)
        else:
            for row in rows.tolist():
                heap.addn(width, faiss.swig_ptr(block[row]), start, row, 1)
    heap.reorder()
    return D, I
