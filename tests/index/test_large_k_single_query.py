"""One query with a large k (a two-stage shortlist) leaves the one-query kernel and stays exact."""

from __future__ import annotations

import numpy as np
import pytest

from app.index.hamming.topk import SINGLE_MAX_K, knn_hamming


@pytest.mark.parametrize("k", [SINGLE_MAX_K, SINGLE_MAX_K + 1, 1500])
def test_distances_match_a_brute_force_reference(k: int) -> None:
    rng = np.random.default_rng(k)
    database = rng.integers(0, 256, (5000, 32), dtype=np.uint8)
    query = rng.integers(0, 256, (1, 32), dtype=np.uint8)
    reference = np.unpackbits(database ^ query, axis=1).sum(axis=1)

    dist, rows = knn_hamming(query, database, k)

    np.testing.assert_array_equal(dist[0], np.sort(reference)[:k])
    np.testing.assert_array_equal(reference[rows[0]], dist[0])  # each row's distance is its own
    assert len(set(rows[0].tolist())) == k
    # every row strictly closer than the k-th distance is in the answer (ties may go either way)
    assert set(np.flatnonzero(reference < dist[0, -1]).tolist()) <= set(rows[0].tolist())
