"""bench/encoders/onnx_foreign.py's scoring: its random-tie Hamming MAP agrees with the project's qbe_map where no
two distances tie, and differs from an order-based tie-break only by where the ties fall."""

from __future__ import annotations

import numpy as np

from bench.audio.sets import qbe_map
from bench.encoders.onnx_foreign import hamming_map_random_ties


def _brute_force_map(sim: np.ndarray, labels: np.ndarray) -> float:
    """AP per query over every other clip, ranked by ``sim`` (no ties in the input)."""
    aps = []
    for q in range(len(labels)):
        others = [j for j in np.argsort(-sim[q], kind="stable") if j != q]
        hits = labels[others] == labels[q]
        if hits.any():
            precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
            aps.append(float((precision * hits).sum() / hits.sum()))
    return float(np.mean(aps))


def test_without_ties_it_is_the_projects_hamming_map_and_brute_force():
    rng = np.random.default_rng(0)
    n = 12
    labels = [str(i % 3) for i in range(n)]
    owner, keep = np.arange(n), np.ones(n, bool)
    # one window per clip; the scorer only takes dot products, so scaled Gaussian rows stand in for the +-1 signs
    # (real codes tie too often to test the no-tie case): every query's similarities are at least 0.2 apart,
    # twice the random tie-break's range
    signs = 10 * rng.standard_normal((n, 64)).astype(np.float32)
    sim = signs @ signs.T
    assert all(np.diff(np.sort(np.delete(row, q))).min() > 0.2 for q, row in enumerate(sim))
    ours = hamming_map_random_ties(signs, owner, labels, keep, seed=1)
    assert abs(ours - qbe_map(signs, signs, owner, labels, keep)["hamming"]) < 1e-4
    assert abs(ours - _brute_force_map(sim, np.asarray(labels))) < 1e-9


def test_ties_are_broken_at_random_not_by_clip_order():
    # every clip has the same code: all distances tie, so an order-based tie-break decides MAP alone
    labels = ["a"] * 4 + ["b"] * 4
    signs = np.ones((8, 16), np.float32)
    owner, keep = np.arange(8), np.ones(8, bool)
    maps = [hamming_map_random_ties(signs, owner, labels, keep, seed=s) for s in range(20)]
    assert len(set(np.round(maps, 6))) > 1  # the seed moves it: nothing but chance orders tied clips
