"""Brute-force numpy reference implementations, used by tests to check the FAISS paths.

Deliberately simple and slow: every distance is computed explicitly, then sorted.
"""

from __future__ import annotations

import numpy as np


def hamming_distances(queries: np.ndarray, database: np.ndarray) -> np.ndarray:
    """All pairwise Hamming distances between packed uint8 codes.

    Args:
        queries: ``(nq, nbytes)`` uint8.
        database: ``(n, nbytes)`` uint8.

    Returns:
        int64 ``(nq, n)``: number of differing bits.
    """
    # XOR then popcount byte by byte: independent of bit order, so it checks the packing too.
    xor = np.bitwise_xor(queries[:, None, :], database[None, :, :])
    return np.unpackbits(xor, axis=2).sum(axis=2, dtype=np.int64)


def inner_products(queries: np.ndarray, database: np.ndarray) -> np.ndarray:
    """All pairwise inner products, computed in float64: ``(nq, n)``."""
    return queries.astype(np.float64) @ database.astype(np.float64).T


def knn_hamming(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact Hamming k-NN: ``(distances, row numbers)`` ascending, padded with (-1, -1)."""
    return _top_k(hamming_distances(queries, database), k, ascending=True)


def knn_inner_product(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact inner-product k-NN: ``(similarities, row numbers)`` descending, padded with -1 rows."""
    return _top_k(inner_products(queries, database), k, ascending=False)


def _top_k(scores: np.ndarray, k: int, *, ascending: bool) -> tuple[np.ndarray, np.ndarray]:
    nq, n = scores.shape
    order = np.argsort(scores if ascending else -scores, axis=1, kind="stable")[:, :k]
    top = np.take_along_axis(scores, order, axis=1)
    values = np.full((nq, k), -1 if ascending else -np.inf, dtype=scores.dtype)
    rows = np.full((nq, k), -1, dtype=np.int64)
    values[:, : min(k, n)] = top
    rows[:, : min(k, n)] = order
    return values, rows
