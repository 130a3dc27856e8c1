"""The shared-scan Hamming kernel (numba): several queries answered in one pass over the codes.

Why a compiled kernel (numba, no build step): with 16 queries the scan is compute-bound, not
memory-bound. FAISS' batched call (``faiss.hammings``) writes a full distance matrix that
Python then has to reduce block by block, and its heap insertion is per pair; together they
ran at ~0.6 ns per (query, code) pair on 2 cores. Here, per database row, the queries sit in
vector registers transposed (one 64-bit word of every query per register lane), so one row
is XORed against all queries at once and counted with the CPU's vector popcount (LLVM emits
``vpopcntq`` on AVX-512 machines, a shuffle-based count elsewhere). The per-block minimum of
each query is kept in the same loop, so a block that cannot improve a query's top-k (almost
every block after the first few) costs no further pass.

Exact; at equal distances the earlier row wins (ties at the k-th distance may be broken
differently from FAISS).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

INT32_MAX = np.iinfo(np.int32).max


@intrinsic
def _popcount64(typingctx, value):  # noqa: ARG001 - numba's intrinsic signature
    """LLVM's ctpop on one uint64: vectorised by LLVM when it sits in a loop over queries."""
    signature = types.uint64(types.uint64)

    def codegen(context, builder, sig, args):  # noqa: ARG001
        return builder.ctpop(args[0])

    return signature, codegen


@njit(nogil=True, cache=True, boundscheck=False)
def _insert(distances, rows, d, row):  # pragma: no cover - compiled
    """Insert ``(d, row)`` into an ascending top-k list whose last entry it beats."""
    p = distances.shape[0] - 1
    while p > 0 and distances[p - 1] > d:
        distances[p] = distances[p - 1]
        rows[p] = rows[p - 1]
        p -= 1
    distances[p] = d
    rows[p] = row


@njit(nogil=True, cache=True, boundscheck=False)
def _block_distances_4_words(qt, db, start, stop, out, block_min):  # pragma: no cover - compiled
    """256-bit codes (the default): the four query words are hoisted out of the row loop."""
    nq = qt.shape[1]
    q0, q1, q2, q3 = qt[0], qt[1], qt[2], qt[3]
    for j in range(nq):
        block_min[j] = INT32_MAX
    for r in range(start, stop):
        x0, x1, x2, x3 = db[r, 0], db[r, 1], db[r, 2], db[r, 3]
        row = out[r - start]
        for j in range(nq):  # the vectorised loop: lanes are queries
            d = np.int32(
                _popcount64(q0[j] ^ x0) + _popcount64(q1[j] ^ x1) + _popcount64(q2[j] ^ x2) + _popcount64(q3[j] ^ x3)
            )
            row[j] = d
            block_min[j] = min(block_min[j], d)


@njit(nogil=True, cache=True, boundscheck=False)
def _block_distances_any_words(qt, db, start, stop, out, block_min):  # pragma: no cover - compiled
    """Any whole number of 64-bit words per code."""
    words, nq = qt.shape
    for j in range(nq):
        block_min[j] = INT32_MAX
    for r in range(start, stop):
        row = out[r - start]
        for j in range(nq):
            row[j] = 0
        for w in range(words):
            x = db[r, w]
            qw = qt[w]
            for j in range(nq):
                row[j] += np.int32(_popcount64(qw[j] ^ x))
        for j in range(nq):
            block_min[j] = min(block_min[j], row[j])


@njit(nogil=True, cache=True, boundscheck=False)
def _knn_words(queries, nq, database, k, block_rows):  # pragma: no cover - compiled
    """Top-k of the first ``nq`` of ``queries`` (the rest is lane padding) over uint64 word
    rows; ``(distances int32, rows int64)`` ascending, padded."""
    lanes, words = queries.shape
    n = database.shape[0]
    qt = np.ascontiguousarray(queries.T)
    distances = np.full((nq, k), INT32_MAX, np.int32)
    rows = np.full((nq, k), -1, np.int64)
    worst = np.full(nq, INT32_MAX, np.int32)  # each query's current k-th best distance
    out = np.empty((block_rows, lanes), np.int32)
    block_min = np.empty(lanes, np.int32)
    for start in range(0, n, block_rows):
        stop = min(n, start + block_rows)
        if words == 4:
            _block_distances_4_words(qt, database, start, stop, out, block_min)
        else:
            _block_distances_any_words(qt, database, start, stop, out, block_min)
        for j in range(nq):
            if block_min[j] >= worst[j]:
                continue
            bound = worst[j]
            for r in range(stop - start):
                d = out[r, j]
                if d < bound:  # strict: a later row at the same distance does not displace
                    _insert(distances[j], rows[j], d, start + r)
                    bound = distances[j, k - 1]
            worst[j] = bound
    return distances, rows


def per_query(
    queries: np.ndarray, database: np.ndarray, k: int, answer_one: Callable[..., tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Top-k of each query by ``answer_one(flat database words, rows, words per code, query words)``,
    the one-query kernels' common driver; ``(distances int32, rows int64)``, each ``(nq, k)``."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    nq, nbytes = queries.shape
    words = nbytes // 8
    flat = np.ascontiguousarray(database).view(np.uint64).reshape(-1)
    q_words = np.ascontiguousarray(queries).view(np.uint64).reshape(nq, words)
    distances = np.empty((nq, k), np.int32)
    rows = np.empty((nq, k), np.int64)
    for i in range(nq):
        distances[i], rows[i] = answer_one(flat, len(database), words, q_words[i])
    return distances, rows


# Queries per vector group of the shared scan (two AVX-512 registers of 64-bit words).
QUERY_LANES = 16


def default_block_rows(nq: int) -> int:
    """Rows per block: the ``(rows, nq)`` int32 block of distances stays in L1/L2.

    Measured on 5e6 x 256-bit codes with 16 queries: 256 rows best (128: +25%, 1024: +15%).
    """
    return max(64, min(1024, 4096 // max(nq, 1)))


def knn_hamming_shared(
    queries: np.ndarray, database: np.ndarray, k: int, block_rows: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Exact Hamming k-NN of packed uint8 codes whose width is a multiple of 8 bytes.

    Returns ``(distances int32, rows int64)``, each ``(nq, k)``, ascending; when ``k > n``
    the tail is ``(int32 max, -1)``.
    """
    nq, nbytes = queries.shape
    if nbytes % 8:
        raise ValueError(f"the shared-scan kernel needs whole 64-bit words, got {nbytes} bytes per code")
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    # LLVM vectorises the loop over queries in groups of QUERY_LANES and leaves any rest to a
    # scalar loop that costs several times more (12 queries took 4x as long as 16), so the
    # queries are padded to whole groups; the padding lanes are computed and ignored.
    lanes = -(-nq // QUERY_LANES) * QUERY_LANES
    q_words = np.zeros((lanes, nbytes // 8), dtype=np.uint64)
    q_words[:nq] = np.ascontiguousarray(queries).view(np.uint64)
    db_words = np.ascontiguousarray(database).view(np.uint64).reshape(len(database), nbytes // 8)
    block = default_block_rows(lanes) if block_rows is None else max(1, int(block_rows))
    return _knn_words(q_words, nq, db_words, int(k), block)


def warm_up() -> None:
    """Compile (or load from numba's cache) both kernel variants on a tiny input."""
    codes = np.zeros((8, 32), dtype=np.uint8)
    for width in (32, 8):  # the four-word path and the generic one
        knn_hamming_shared(codes[:4, :width], codes[:, :width], 1)
