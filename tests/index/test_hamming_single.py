"""The one-query vector kernel against the brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest

from app.index import HAMMING_PAD, exact
from app.index.hamming.single import knn_hamming_single, supports
from tests.index.conftest import assert_knn_consistent, clustered_codes, random_codes


@pytest.mark.parametrize("bits", [64, 128, 256, 512])
@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 1000, 2053])
@pytest.mark.parametrize("k", [1, 10, 200])
def test_matches_exact_on_ragged_sizes_and_ties(rng: np.random.Generator, bits: int, n: int, k: int) -> None:
    # n around a step (16 rows at 128 bits, 8 at 256, 32 at 64, 4 at 512) puts the scalar tail
    # and step boundaries inside small data; clustered codes tie often, also at the k-th best.
    codes = clustered_codes(rng, n, bits, centres=5)
    queries = np.concatenate([codes[:1], random_codes(rng, 2, bits)])
    distances, rows = knn_hamming_single(queries, codes, k)
    assert distances.shape == (3, k) and rows.shape == (3, k)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(n), k, ascending=True)
    if k > n:
        assert (distances[:, n:] == HAMMING_PAD).all() and (rows[:, n:] == -1).all()


def test_distances_are_bit_counts_and_ties_keep_the_earlier_row(rng: np.random.Generator) -> None:
    codes = random_codes(rng, 300, 128)
    codes[200] = codes[40]  # an exact duplicate later in the array
    query = codes[40:41].copy()
    query[0, 0] ^= 1  # one bit away from both copies
    distances, rows = knn_hamming_single(query, codes, 300)
    counted = np.unpackbits(np.bitwise_xor(codes[rows[0]], query[0]), axis=1).sum(axis=1)
    np.testing.assert_array_equal(distances[0], counted)
    assert rows[0, :2].tolist() == [40, 200] and distances[0, :2].tolist() == [1, 1]


def test_every_bit_position_counts(rng: np.random.Generator) -> None:
    """A code differing from the query in exactly bit j is at distance 1, for every j and row slot."""
    for nbytes in (8, 16, 32, 64):
        query = random_codes(rng, 1, nbytes * 8)
        bits = np.unpackbits(np.repeat(query, nbytes * 8, axis=0), axis=1, bitorder="little")
        bits[np.arange(nbytes * 8), np.arange(nbytes * 8)] ^= 1
        codes = np.concatenate([np.packbits(bits, axis=1, bitorder="little"), np.repeat(~query, 5, axis=0)])
        distances, rows = knn_hamming_single(query, codes, nbytes * 8 + 5)
        assert sorted(rows[0, : nbytes * 8].tolist()) == list(range(nbytes * 8))
        assert (distances[0, : nbytes * 8] == 1).all() and (distances[0, nbytes * 8 :] == nbytes * 8).all()


def test_strided_rows_and_empty_database(rng: np.random.Generator) -> None:
    wide = random_codes(rng, 400, 256)
    codes = wide[::2]
    queries = random_codes(rng, 1, 256)
    distances, rows = knn_hamming_single(queries, codes, 9)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(200), 9, ascending=True)
    distances, rows = knn_hamming_single(queries, codes[:0], 3)
    assert (distances == HAMMING_PAD).all() and (rows == -1).all()


def test_widths_it_does_not_take_are_refused(rng: np.random.Generator) -> None:
    assert [supports(b) for b in (8, 16, 24, 32, 64, 128)] == [True, True, False, True, True, False]
    with pytest.raises(ValueError, match="bytes per code"):
        knn_hamming_single(random_codes(rng, 1, 192), random_codes(rng, 10, 192), 2)
    with pytest.raises(ValueError, match="k must be"):
        knn_hamming_single(random_codes(rng, 1, 128), random_codes(rng, 10, 128), 0)


def test_a_kernel_that_cannot_compile_falls_back_to_faiss(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    from numba.core.errors import LoweringError

    import app.index.hamming.topk as hamming
    import app.index.hamming.single as single

    def broken(*args, **kwargs):
        raise LoweringError("intrinsic refused by this LLVM")

    monkeypatch.setattr(single, "_usable", True)
    monkeypatch.setattr(hamming, "knn_hamming_single", broken)
    codes = random_codes(rng, 500, 128)
    query = random_codes(rng, 1, 128)
    distances, rows = hamming.knn_hamming(query, codes, 7)  # answered by the heap scan
    assert_knn_consistent(distances, rows, exact.hamming_distances(query, codes), np.arange(500), 7, ascending=True)
    assert not single.supports(16)  # and the kernel is not tried again
    monkeypatch.setattr(single, "knn_hamming_single", broken)
    single.warm_up()  # warm-up failing the same way disables, it does not raise
    assert not single.supports(16)
