"""One-query Hamming top-k for a large k (a two-stage shortlist), by counting distances.

Why: a re-ranked text query asks stage 1 for a shortlist of 4,000 codes (k 100, four times as
deep for items with many windows, ten times oversampled), and an audio query for 400. FAISS' heap
scan pays ``log k`` per code that enters the heap, and with thousands of slots almost every early
code enters: on 5 x 10^4 codes of 128 bits (one shard of the bench's 10^5 images) k = 4,000 took
1.8 ms against 0.1 ms for k = 10. A Hamming distance is a small integer (0..bits), so the k
nearest can be found without any ordering work: one pass computes every row's distance and a
histogram of them, the histogram's running sum says where each distance's rows start in the
answer, and a second pass over the (cache-resident) distances drops each row into its slot. The
cost is two linear passes whatever k is: 0.22-0.34 ms for that shard at any k, measured
(bench notes in app/index/hamming/topk.py).

Exact; rows at equal distance come in row order (the earlier row wins at the k-th distance), as in
the other kernels.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from app.index.hamming.shared_scan import INT32_MAX, _popcount64, per_query


@njit(nogil=True, cache=True, boundscheck=False)
def _select_one(flat, n, words, query, k):  # pragma: no cover - compiled
    """Top-k of one query over ``n`` rows of ``words`` uint64 words; ascending, padded."""
    bits = words * 64
    distances = np.empty(n, np.int32)
    counts = np.zeros(bits + 1, np.int64)
    for row in range(n):
        d = 0
        base = row * words
        for w in range(words):
            d += _popcount64(flat[base + w] ^ query[w])
        distances[row] = d
        counts[d] += 1
    # next free slot of the answer for each distance: the running sum of the histogram
    slot = np.empty(bits + 1, np.int64)
    total = 0
    for d in range(bits + 1):
        slot[d] = total
        total += counts[d]
    kept = min(k, n)
    out_distances = np.full(k, INT32_MAX, np.int32)
    out_rows = np.full(k, -1, np.int64)
    for row in range(n):
        d = distances[row]
        p = slot[d]
        if p < kept:  # rows of this distance past the k-th slot are not in the answer
            out_distances[p] = d
            out_rows[p] = row
            slot[d] = p + 1
    return out_distances, out_rows


def supports(nbytes: int) -> bool:
    """Whether codes of ``nbytes`` bytes can be counted here (whole 64-bit words)."""
    return nbytes > 0 and nbytes % 8 == 0


def knn_hamming_select(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact Hamming k-NN of packed uint8 codes, two counting passes per query.

    Returns ``(distances int32, rows int64)``, each ``(nq, k)``, ascending (equal distances in row
    order); when ``k > n`` the tail is ``(int32 max, -1)``.
    """
    if not supports(queries.shape[1]):
        raise ValueError(f"the counting kernel needs whole 64-bit words, got {queries.shape[1]} bytes per code")
    return per_query(queries, database, k,
                     lambda flat, n, words, query: _select_one(flat, n, words, query.copy(), int(k)))


def warm_up() -> None:
    """Compile (or load from numba's cache) the kernel."""
    codes = np.zeros((4, 8), dtype=np.uint8)
    knn_hamming_select(codes[:1], codes, 2)
