"""Exact Hamming top-k kernels on packed codes, built on FAISS' C++ routines.

Two kernels, picked by batch size:

* one query: ``faiss.hammings_knn_hc``, a heap scan. Per code it costs about as much as
  streaming the code from memory, so with one shard per core it runs at memory bandwidth.
* five or more queries ("shared scan"): the heap scan is compute-bound at ~1 ns per
  (query, code) pair (scalar popcounts and a heap test per pair), so 16 queries cost almost
  16 scans. Instead the database is cut into cache-sized blocks; for each block
  ``faiss.hammings`` (SIMD popcount, ~0.35 ns per pair) writes the full ``(nq, block)``
  distance matrix into a reused buffer, and only pairs that beat the query's current k-th
  best distance are kept. After the first blocks such pairs are rare, so a per-row minimum
  (one SIMD pass) usually shows that a block needs no further work.

Both are exact; ties at the k-th distance may be broken differently.
"""

from __future__ import annotations

import faiss
import numpy as np

# Below this many queries the heap scan is cheaper: it is cache-blocked over queries too,
# and the shared scan's fixed per-block costs are not yet paid back (measured crossover ~5).
BATCHED_MIN_QUERIES = 5
# Pairs per block of the batched kernel: an int32 (nq, block) matrix of 1 MB stays in L2
# while the next block's codes stream in. Block rows are clamped so that per-block Python
# overhead (~10 us) stays small next to the per-block SIMD work.
BLOCK_PAIRS = 1 << 18
MIN_BLOCK_ROWS = 1 << 14
MAX_BLOCK_ROWS = 1 << 17
# Rows used to seed the thresholds (at least 4k).
SEED_ROWS = 2048
# Candidates gathered before the per-query thresholds are tightened by a merge, per (query, k).
_MERGE_FACTOR = 1


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
    n = len(database)
    if nq >= BATCHED_MIN_QUERIES and nbytes % 8 == 0 and n > k:  # hammings needs whole 64-bit words
        if block_rows is None:
            block_rows = min(MAX_BLOCK_ROWS, max(MIN_BLOCK_ROWS, BLOCK_PAIRS // nq))
        return knn_hamming_batched(queries, database, k, block_rows)
    return knn_hamming_heap(queries, database, k)


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
    """Shared-scan kernel for several queries; requires ``n > k`` and nbytes % 8 == 0."""
    nq, nbytes = queries.shape
    n = len(database)
    query_ptr = faiss.swig_ptr(queries)
    buffer = np.empty(nq * block_rows, dtype=np.int32)

    def distances(start: int, stop: int) -> np.ndarray:
        block = buffer[: nq * (stop - start)].reshape(nq, stop - start)
        faiss.hammings(query_ptr, faiss.swig_ptr(database[start:stop]), nq, stop - start, nbytes, faiss.swig_ptr(block))
        return block

    # A small first block seeds each query's top-k and threshold: a full argpartition over a
    # whole block would cost more than the looser early threshold it saves.
    first = min(n, max(4 * k, SEED_ROWS))
    if first > block_rows:
        buffer = np.empty(nq * first, dtype=np.int32)
    D = distances(0, first)
    part = np.argpartition(D, k - 1, axis=1)[:, :k]
    top_d = np.take_along_axis(D, part, axis=1)
    top_i = part.astype(np.int64)
    threshold = top_d.max(axis=1)
    pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    pending_count = 0
    for start in range(first, n, block_rows):
        stop = min(start + block_rows, n)
        found = _candidates(distances(start, stop), threshold)
        if found is None:
            continue
        query, column, dist = found
        pending.append((query, column + start, dist))
        pending_count += len(query)
        if pending_count > _MERGE_FACTOR * nq * k:
            top_d, top_i = _merge(top_d, top_i, pending)
            threshold = top_d.max(axis=1)
            pending, pending_count = [], 0
    if pending:
        top_d, top_i = _merge(top_d, top_i, pending)
    order = np.argsort(top_d, axis=1, kind="stable")
    return np.take_along_axis(top_d, order, axis=1), np.take_along_axis(top_i, order, axis=1)


def _candidates(D: np.ndarray, threshold: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Entries of ``D`` (nq, width) strictly below their row's threshold, or None.

    Strict "<": a later code tied with the k-th best cannot displace it, and skipping ties
    keeps the candidate stream short on codes with many equal distances. A query beats its
    threshold only ~k * ln(n / block) times in a whole scan, so a per-row minimum (one fast
    SIMD pass) usually shows that nothing in the block matters; only rows that do are
    searched entry by entry.
    """
    rows = np.flatnonzero(D.min(axis=1) < threshold)
    if len(rows) == 0:
        return None
    sub = D[rows]
    flat = np.flatnonzero(sub < threshold[rows, None])
    width = D.shape[1]
    return rows[flat // width], flat % width, sub.reshape(-1)[flat]


def _merge(
    top_d: np.ndarray, top_i: np.ndarray, pending: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Fold candidate (query, row, distance) triples into each query's k best."""
    nq, k = top_d.shape
    query = np.concatenate([np.repeat(np.arange(nq), k)] + [p[0] for p in pending])
    row = np.concatenate([top_i.reshape(-1)] + [p[1] for p in pending])
    dist = np.concatenate([top_d.reshape(-1)] + [p[2] for p in pending])
    order = np.lexsort((dist, query))
    # Every query owns at least its k current entries, so its k best start at its first slot.
    starts = np.searchsorted(query[order], np.arange(nq))
    pick = order[starts[:, None] + np.arange(k)[None, :]]
    return dist[pick], row[pick]
