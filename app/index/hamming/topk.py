"""Exact Hamming top-k on packed codes: picks the kernel by batch size.

* one query of 64 to 512 bits: ``single.knn_hamming_single``, explicit 512-bit vector
  code (four vectors of codes per step, one vector popcount each, a bit mask of the rows that
  may enter the top-k). Codes that fit the last-level cache (10^6 x 128 bits = 16 MB) are
  scanned ~2-3x faster than by FAISS' heap scan; arrays streamed from memory run at the same
  memory-bound speed as before (5e6 x 256 bits: 5.4 vs 5.6 ms on one core).
* one to three queries with k above ``SINGLE_MAX_K`` (a two-stage shortlist):
  ``select.knn_hamming_select``, two counting passes whatever k is. One shard of
  5 x 10^4 codes, one core, best of 30: 128 bits, k 400 / 1000 / 4000: 0.22 / 0.22 / 0.27 ms
  against FAISS' 0.28 / 0.55 / 1.81; 512 bits, k 400 / 4000: 0.34 / 0.29 against 0.30 / 1.66. A shard of
  2.5 x 10^6 x 256 bits (half of the 5M index), k 300 / 400 / 1000 / 4000, medians of 7 on a busy machine:
  16 / 17 / 12 / 12 ms against 23 / 22 / 28 / 24 (its per-row distances, 10 MB, are written and re-read).
* two or three queries with a smaller k, or other widths: ``faiss.hammings_knn_hc``, FAISS' heap
  scan. Per code it costs about as much as streaming the code from memory, so with one shard per
  core it runs at memory bandwidth.
* four or more queries ("shared scan"): the heap scan is compute-bound at ~1 ns per
  (query, code) pair, so 16 queries would cost almost 16 scans.
  ``shared_scan.knn_hamming_shared`` reads each code once and compares it with every
  query in vector registers.

Measured on 5e6 x 256-bit codes, 2 shards, medians of interleaved calls (ms), noisy machine:
2 queries: heap 6.4 (shared 10.5); 3: heap 8.6 (shared 10.9);
4: shared 10.6 (heap 10.5); 8: 21 (heap 35); 16: 19 (heap 67).

Both are exact; ties at the k-th distance may be broken differently.
"""

from __future__ import annotations

import faiss
import numpy as np
from numba.core.errors import NumbaError

from app.index.hamming.shared_scan import knn_hamming_shared
from app.index.hamming.select import knn_hamming_select
from app.index.hamming.single import disable as disable_single
from app.index.hamming.single import knn_hamming_single, supports

# From this many queries on, the shared scan beats the heap scan (see above).
BATCHED_MIN_QUERIES = 4
# Queries per pass of the shared scan: bounds the per-block distance buffer when a long
# recording is windowed into hundreds of query codes.
MAX_BATCH_QUERIES = 256
# The one-query kernel keeps its top k in a sorted list, so each insertion shifts up to k
# entries: past a few hundred neighbours FAISS' heap wins, and the counting kernel beats both. Measured on 10^5 x 256 bits, one
# thread: k=200 0.42 vs 0.37 ms, k=400 0.66 vs 0.34, k=1000 2.2 vs 0.6, k=4000 (a re-ranked text
# query's shortlist) 25 vs 1.8 ms; at k <= 100 the kernel is as fast or faster.
SINGLE_MAX_K = 256


def knn_hamming(
    queries: np.ndarray, database: np.ndarray, k: int, *, block_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Hamming k-NN of packed uint8 codes.

    Args:
        queries: ``(nq, nbytes)`` uint8, C-contiguous.
        database: ``(n, nbytes)`` uint8.
        k: neighbours per query.
        block_rows: database rows per block of the shared scan (tests use odd sizes to cross
            block boundaries on small data); default from ``default_block_rows``.

    Returns:
        ``(distances int32, rows int64)``, each ``(nq, k)``, ascending; when ``k > n`` the
        tail is padded with ``(int32 max, -1)``.
    """
    nq, nbytes = queries.shape
    if nq == 1 and supports(nbytes) and k <= SINGLE_MAX_K:
        try:
            return knn_hamming_single(queries, database, k)
        except NumbaError as exc:  # the kernel failed to compile here: answer with FAISS instead
            disable_single(exc)
    if nbytes % 8:  # the compiled kernels work on whole 64-bit words
        return knn_hamming_heap(queries, database, k)
    if nq < BATCHED_MIN_QUERIES:
        if k > SINGLE_MAX_K:
            return knn_hamming_select(queries, database, k)
        return knn_hamming_heap(queries, database, k)
    if nq > MAX_BATCH_QUERIES:
        parts = [
            knn_hamming(queries[start : start + MAX_BATCH_QUERIES], database, k, block_rows=block_rows)
            for start in range(0, nq, MAX_BATCH_QUERIES)
        ]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    return knn_hamming_shared(queries, database, k, block_rows)


def knn_hamming_heap(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """FAISS' heap scan (``hammings_knn_hc``)."""
    nq, nbytes = queries.shape
    database = np.ascontiguousarray(database)
    D = np.empty((nq, k), dtype=np.int32)
    I = np.empty((nq, k), dtype=np.int64)
    heap = faiss.int_maxheap_array_t()
    heap.k, heap.nh = k, nq
    heap.val, heap.ids = faiss.swig_ptr(D), faiss.swig_ptr(I)
    faiss.hammings_knn_hc(heap, faiss.swig_ptr(queries), faiss.swig_ptr(database), len(database), nbytes, 1)
    return D, I
