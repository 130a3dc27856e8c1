"""The counting kernel for large k: exact, ties in row order, against a brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from app.index.hamming.topk import SINGLE_MAX_K, knn_hamming
from app.index.hamming.select import knn_hamming_select
from tests.index.conftest import clustered_codes, random_codes


def _reference(queries: np.ndarray, database: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every distance by unpacking bits; a stable sort puts equal distances in row order."""
    distances = np.stack([np.unpackbits(database ^ q, axis=1).sum(axis=1) for q in queries]).astype(np.int32)
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    out_d = np.full((len(queries), k), np.iinfo(np.int32).max, np.int32)
    out_r = np.full((len(queries), k), -1, np.int64)
    m = min(k, len(database))
    out_d[:, :m] = np.take_along_axis(distances, order, axis=1)[:, :m]
    out_r[:, :m] = order[:, :m]
    return out_d, out_r


@pytest.mark.parametrize("bits", [64, 128, 256, 512, 1024])
@pytest.mark.parametrize("k", [1, 7, 300, 999])
def test_matches_the_reference_exactly_with_many_ties(bits: int, k: int) -> None:
    rng = np.random.default_rng(bits * 1000 + k)
    database = clustered_codes(rng, 700, bits)  # near-duplicates: long runs of equal distances
    queries = np.concatenate([database[[3]], random_codes(rng, 2, bits)])

    distances, rows = knn_hamming_select(queries, database, k)

    want_d, want_r = _reference(queries, database, k)
    np.testing.assert_array_equal(distances, want_d)
    np.testing.assert_array_equal(rows, want_r)  # equal distances keep row order, not just the multiset


def test_k_beyond_the_database_is_padded() -> None:
    rng = np.random.default_rng(5)
    database = random_codes(rng, 10, 128)

    distances, rows = knn_hamming_select(database[:1], database, 25)

    assert distances[0, 0] == 0 and rows[0, 0] == 0
    assert (rows[0, 10:] == -1).all() and (distances[0, 10:] == np.iinfo(np.int32).max).all()
    assert sorted(rows[0, :10].tolist()) == list(range(10))


def test_strided_database_and_every_bit_position() -> None:
    database = np.zeros((65, 16), np.uint8)
    for bit in range(64):  # row 1 + bit differs from the all-zero query in that bit only
        database[1 + bit, bit // 8] = 1 << (bit % 8)
    view = np.concatenate([database, database], axis=1)[:, :16]  # a non-contiguous view
    query = np.zeros((1, 16), np.uint8)

    distances, rows = knn_hamming_select(query, view, 65)

    assert distances[0].tolist() == [0] + [1] * 64
    assert rows[0].tolist() == list(range(65))


def test_refuses_partial_words_and_k_below_one() -> None:
    codes = np.zeros((4, 12), np.uint8)
    with pytest.raises(ValueError, match="64-bit words"):
        knn_hamming_select(codes[:1], codes, 2)
    with pytest.raises(ValueError, match="at least 1"):
        knn_hamming_select(np.zeros((1, 8), np.uint8), np.zeros((4, 8), np.uint8), 0)


@pytest.mark.parametrize("nq", [1, 3])
def test_the_dispatcher_sends_a_large_k_here(nq: int) -> None:
    rng = np.random.default_rng(nq)
    database = clustered_codes(rng, 3000, 128)
    queries = random_codes(rng, nq, 128)
    k = SINGLE_MAX_K + 50

    got = knn_hamming(queries, database, k)

    for a, b in zip(got, knn_hamming_select(queries, database, k)):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[0], _reference(queries, database, k)[0])
