"""FloatIndex against the numpy reference, exact re-ranking scores and validation."""

from __future__ import annotations

import numpy as np
import pytest

from app.index import FloatIndex, cosine_distance
from app.index import exact
from tests.index.conftest import assert_knn_consistent, unit_vectors

# float32 dot products of 128-d unit vectors differ from the float64 reference by ~1e-7;
# 1e-5 leaves room for BLAS summation order without hiding a wrong neighbour.
ATOL = 1e-5


@pytest.mark.parametrize("shards", [1, 2, 3])
@pytest.mark.parametrize("nq", [1, 5, 40])  # 1 query: own SIMD scan; several: the BLAS path
def test_search_matches_exact(rng: np.random.Generator, shards: int, nq: int) -> None:
    vectors = unit_vectors(rng, 1500, 128)
    ids = rng.permutation(100_000)[:1500].astype(np.int64)
    index = FloatIndex(128, shards=shards)
    index.parallel_min_rows = 0
    index.add(ids, vectors)
    queries = unit_vectors(rng, nq, 128)
    for k in (1, 7, 100):
        sims, labels = index.search(queries, k)
        assert sims.dtype == np.float32
        assert_knn_consistent(sims, labels, exact.inner_products(queries, vectors), ids, k, ascending=False, atol=ATOL)


def test_score_is_exact_for_a_shortlist(rng: np.random.Generator) -> None:
    vectors = unit_vectors(rng, 300, 32)
    index = FloatIndex(32)
    index.add(np.arange(300) + 1000, vectors)
    query = unit_vectors(rng, 1, 32)[0]
    shortlist = np.array([1299, 1000, 1150])
    np.testing.assert_allclose(index.score(query, shortlist), vectors[[299, 0, 150]] @ query, atol=1e-6)
    with pytest.raises(KeyError):
        index.score(query, [1000, 5])
    with pytest.raises(ValueError, match="1-D"):
        index.score(query[None], shortlist)


def test_padding_and_distance_semantics(rng: np.random.Generator) -> None:
    vectors = unit_vectors(rng, 2, 16)
    index = FloatIndex(16)
    index.add([1, 2], vectors)
    sims, labels = index.search(vectors[:1], 4)
    assert labels[0, 0] == 1 and sims[0, 0] == pytest.approx(1.0, abs=1e-6)
    assert labels[0, 2:].tolist() == [-1, -1] and np.isneginf(sims[0, 2:]).all()
    assert cosine_distance(sims)[0, 0] == pytest.approx(0.0, abs=1e-6)


def test_remove_then_search_never_returns_removed(rng: np.random.Generator) -> None:
    vectors = unit_vectors(rng, 500, 24)
    index = FloatIndex(24, shards=2)
    index.add(np.arange(500), vectors)
    gone = np.arange(0, 500, 3)
    assert index.remove(gone) == len(gone)
    sims, labels = index.search(vectors[:50], 20)
    assert not np.isin(labels, gone).any()
    keep = np.setdiff1d(np.arange(500), gone)
    assert_knn_consistent(sims, labels, exact.inner_products(vectors[:50], vectors[keep]), keep, 20, ascending=False, atol=ATOL)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((2, 15), dtype=np.float32), "16 dimensions"),
        (np.zeros((2, 16), dtype=np.float64), "dtype float32"),
        (np.full((2, 16), np.nan, dtype=np.float32), "NaN"),
    ],
)
def test_wrong_vectors_are_rejected(bad: np.ndarray, message: str) -> None:
    index = FloatIndex(16)
    with pytest.raises(ValueError, match=message):
        index.add([1, 2], bad)
    with pytest.raises(ValueError, match=message):
        index.search(bad, 1)
    assert len(index) == 0


def test_unnormalised_vectors_are_rejected_unless_allowed(rng: np.random.Generator) -> None:
    vectors = 2 * unit_vectors(rng, 3, 8)
    with pytest.raises(ValueError, match="L2-normalised"):
        FloatIndex(8).add([1, 2, 3], vectors)
    loose = FloatIndex(8, check_norm=False)
    loose.add([1, 2, 3], vectors)
    assert len(loose) == 3


def test_both_kinds_satisfy_the_index_protocol() -> None:
    from app.index import BinaryIndex, VectorIndex

    assert isinstance(FloatIndex(8), VectorIndex)
    assert isinstance(BinaryIndex(8), VectorIndex)


def test_two_stage_rerank_recovers_exact_top_k(rng: np.random.Generator) -> None:
    # Codes = signs of the float vectors, so a generous Hamming shortlist contains the exact
    # float neighbours; re-scoring the shortlist with score() must then reproduce them.
    from app.index import BinaryIndex

    vectors = unit_vectors(rng, 2000, 64)
    codes = np.packbits(vectors > 0, axis=1, bitorder="little")
    ids = np.arange(2000) + 10
    floats, binary = FloatIndex(64), BinaryIndex(64)
    floats.add(ids, vectors)
    binary.add(ids, codes)
    query = vectors[7] + 0.05 * unit_vectors(rng, 1, 64)[0]
    query = (query / np.linalg.norm(query)).astype(np.float32)
    _, shortlist = binary.search(np.packbits(query[None] > 0, axis=1, bitorder="little"), 800)
    shortlist = shortlist[0][shortlist[0] >= 0]
    sims = floats.score(query, shortlist)
    reranked = shortlist[np.argsort(-sims, kind="stable")][:5]
    exact_sims, exact_ids = floats.search(query[None], 5)
    assert reranked[0] == 17
    np.testing.assert_allclose(np.sort(sims)[::-1][:5], exact_sims[0], atol=ATOL)
    assert set(reranked.tolist()) == set(exact_ids[0].tolist())
