"""Seeded synthetic data and tie-tolerant checks against the brute-force reference."""

from __future__ import annotations

import numpy as np
import pytest


def random_codes(rng: np.random.Generator, n: int, bits: int) -> np.ndarray:
    """Packed codes in FAISS bit order, as the encoders produce them."""
    return np.packbits(rng.integers(0, 2, (n, bits), dtype=np.uint8), axis=1, bitorder="little")


def clustered_codes(rng: np.random.Generator, n: int, bits: int, centres: int = 8, flip: float = 0.05) -> np.ndarray:
    """Codes near a few centres: many near-duplicates and many tied distances."""
    base = rng.integers(0, 2, (centres, bits), dtype=np.uint8)
    noise = (rng.random((n, bits)) < flip).astype(np.uint8)
    return np.packbits(base[rng.integers(0, centres, n)] ^ noise, axis=1, bitorder="little")


def unit_vectors(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def assert_knn_consistent(
    scores: np.ndarray,
    ids: np.ndarray,
    truth: np.ndarray,
    db_ids: np.ndarray,
    k: int,
    *,
    ascending: bool,
    atol: float = 0.0,
) -> None:
    """Check a k-NN answer against the full score matrix, tolerating ties.

    A correct answer may order tied items arbitrarily and pick any of the items tied at the
    k-th score, so we check: (1) the returned scores equal the true top-k score multiset
    (sorted), (2) every returned id really has the returned score, (3) ids are distinct,
    (4) padding appears exactly where fewer than k items exist.

    Args:
        truth: ``(nq, n)`` reference scores for every database row.
        db_ids: id of each database row.
    """
    nq, n = truth.shape
    assert scores.shape == ids.shape == (nq, k)
    row_of = {int(i): r for r, i in enumerate(db_ids)}
    m = min(k, n)
    for q in range(nq):
        ref = np.sort(truth[q])
        ref = ref[:m] if ascending else ref[::-1][:m]
        np.testing.assert_allclose(scores[q, :m], ref, atol=atol, rtol=0)
        got = ids[q, :m]
        assert len(set(got.tolist())) == m, "duplicate ids in one result list"
        true_scores = np.array([truth[q, row_of[int(i)]] for i in got])
        np.testing.assert_allclose(scores[q, :m], true_scores, atol=atol, rtol=0)
        assert (ids[q, m:] == -1).all()
        steps = np.diff(scores[q, :m])
        assert (steps >= -atol).all() if ascending else (steps <= atol).all(), "results not sorted"


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
