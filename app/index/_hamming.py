"""Exact Hamming top-k kernels on packed codes, built on FAISS' C++ routines.

Two kernels, picked by batch size:

* one or two queries: ``faiss.hammings_knn_hc``, a heap scan. Per code it costs about as much as
  streaming the code from memory, so with one shard per core it runs at memory bandwidth.
* three or more queries ("shared scan"): the heap scan is compute-bound at ~1 ns per
  (query, code) pair (scalar popcounts and a heap test per pair), so 16 queries cost almost
  16 scans. Instead the database is cut into cache-sized blocks; for each block
  ``faiss.hammings`` (SIMD popcount, ~0.35 ns per pair) writes the full ``(nq, block)``
  distance matrix into a reused buffer; minima over 2 K-row sub-blocks show which queries
  the block can improve at all, and only those (query, sub-block) pairs go through faiss'
  heap insertion.

Both are exact; ties at the k-th distance may be broken differently.
"""

from __future__ import annotations

import faiss
import numpy as np

# With one query the heap scan is already at memory speed, and with two it is still faster
# (5e6 x 256 bits, 2 shards: 8.4 ms vs 10-11 ms); from three on the shared scan wins
# (3: 11.4 vs 13.3 ms, 4: 12.6 vs 17.8 ms, 16: ~22 vs ~60 ms).
BATCHED_MIN_QUERIES = 3
# Pairs per block of the batched kernel: for 16 queries a 1 MB int32 (nq, block) matrix plus
# the block's 512 KB of codes stay in the 2 MB L2. Block rows are clamped so that per-block
# Python overhead (~10 us) stays small next to the per-block SIMD work. Measured best at 16
# queries: 16 K rows (8 K: ~5-10% slower, 32 K: ~15-20% slower).
BLOCK_PAIRS = 1 << 18
MIN_BLOCK_ROWS = 1 << 13
MAX_BLOCK_ROWS = 1 << 14
# Rows per sub-block: the unit of the "may this improve a heap" test and of heap insertion.
# faiss' heap insertion costs ~0.6 ns per value, so a row that improves re-scans only its
# 2 K-row sub-block instead of the whole block (measured: 1 K - 2 K best at 16 K-row blocks).
SUB_ROWS = 1 << 11
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
    queries: np.ndarray, database: np.ndarray, k: int, block_rows: int, *, sub_rows: int = SUB_ROWS
) -> tuple[np.ndarray, np.ndarray]:
    """Shared-scan kernel for several queries; requires nbytes % 8 == 0.

    ``sub_rows``: granularity of the "can this improve a heap" test inside a block (tests
    pass small values to cross sub-block boundaries on small data).
    """
    nq, nbytes = queries.shape
    n = len(database)
    database = np.ascontiguousarray(database)  # blocks are addressed by pointer arithmetic
    D = np.empty((nq, k), dtype=np.int32)
    I = np.empty((nq, k), dtype=np.int64)
    heap = faiss.int_maxheap_array_t()
    heap.k, heap.nh = k, nq
    heap.val, heap.ids = faiss.swig_ptr(D), faiss.swig_ptr(I)
    heap.heapify()
    # Each query's heap root is its current k-th best distance: a view that the heap updates.
    worst = D[:, :1]
    sub = max(1, min(sub_rows, block_rows, n))
    width = max(1, min(block_rows, n) // sub * sub)  # whole sub-blocks per block
    nsub = width // sub
    # One distance buffer for all full blocks; it and its row/sub-block pointers are made once,
    # so each block costs one faiss call and two numpy calls on preallocated outputs.
    buffer = np.empty((nq, width), dtype=np.int32)
    sub_view = buffer.reshape(nq, nsub, sub)
    sub_min = np.empty((nq, nsub), dtype=np.int32)
    improves = np.empty((nq, nsub), dtype=bool)
    buffer_ptr, buffer_addr = faiss.swig_ptr(buffer), buffer.ctypes.data
    query_ptr, database_addr = faiss.swig_ptr(queries), database.ctypes.data
    hammings, addn = faiss.hammings, heap.addn
    as_codes, as_ints = faiss.cast_integer_to_uint8_ptr, faiss.cast_integer_to_int_ptr
    row_min, less = np.minimum.reduce, np.less
    full_blocks = n // width
    many = nq * nsub // 2
    for number in range(full_blocks):
        start = number * width
        hammings(query_ptr, as_codes(database_addr + start * nbytes), nq, width, nbytes, buffer_ptr)
        # A query beats its k-th best only ~k * ln(n / k) times in a whole scan, so one SIMD
        # pass of sub-block minima usually shows the block changes nothing. Sub-blocks that
        # may change a heap go through faiss' heap insertion (strict "<", so later ties are
        # skipped); a stale (larger) root only lets through sub-blocks that addn re-checks.
        row_min(sub_view, axis=2, out=sub_min)
        less(sub_min, worst, out=improves)
        if not improves.any():
            continue
        rows, subs = improves.nonzero()
        if len(rows) > many:  # early blocks: one call over the whole matrix
            addn(width, buffer_ptr, start, 0, nq)
            continue
        for row, part in zip(rows.tolist(), subs.tolist(), strict=True):
            offset = row * width + part * sub
            addn(sub, as_ints(buffer_addr + 4 * offset), start + part * sub, row, 1)
    tail = n - full_blocks * width
    if tail:
        block = np.empty((nq, tail), dtype=np.int32)
        start = full_blocks * width
        hammings(query_ptr, as_codes(database_addr + start * nbytes), nq, tail, nbytes, faiss.swig_ptr(block))
        addn(tail, faiss.swig_ptr(block), start, 0, nq)
    heap.reorder()
    return D, I
