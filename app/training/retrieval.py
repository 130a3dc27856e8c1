"""All-against-all retrieval scores for validation and reports (vectorised numpy).

Each clip queries every other clip of the set; a hit shares the query's label. Scores are
similarities (higher first). The per-query definitions match ``app.eval.metrics``; these are the
matrix forms, fast enough to run every epoch.
"""

from __future__ import annotations

import numpy as np


def cosine_scores(floats: np.ndarray) -> np.ndarray:
    """(n, n) cosine similarities of L2-normalised (or raw) float rows."""
    x = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
    return x @ x.T


def hamming_scores(values: np.ndarray) -> np.ndarray:
    """(n, n) negated Hamming distances between the sign codes of ``values`` (value > 0 is bit 1)."""
    signs = np.where(values > 0, 1.0, -1.0).astype(np.float32)
    return -(signs.shape[1] - signs @ signs.T) / 2.0


def best_window_scores(window_scores: np.ndarray, owner: np.ndarray, n_items: int) -> np.ndarray:
    """(queries, items) scores from (queries, windows) ones: an item scores its best window.

    ``owner[w]`` is the item window ``w`` was cut from; this is the service's rule (an item's
    cost is the minimum over its segments) in matrix form.
    """
    best = np.full((window_scores.shape[0], n_items), -np.inf)
    np.maximum.at(best.T, owner, window_scores.T)
    return best


def mean_window_scores(window_scores: np.ndarray, owner: np.ndarray, n_items: int) -> np.ndarray:
    """(items, items) scores from (windows, windows) ones by the service's default item rule
    (``item_distance = mean``): each of the query item's windows scores its best window of the
    other item, and the query item's windows are averaged. ``owner`` maps windows to items on both sides.
    """
    per_query_window = best_window_scores(window_scores, owner, n_items)  # (windows, items)
    total = np.zeros((n_items, n_items))
    np.add.at(total, owner, per_query_window)
    return total / np.bincount(owner, minlength=n_items)[:, None]


def _ranked_hits(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(n, n-1) relevance of each query's ranking, itself excluded; ties broken by index (stable)."""
    n = len(labels)
    scores = scores.astype(np.float64, copy=True)
    np.fill_diagonal(scores, -np.inf)
    order = np.argsort(-scores, axis=1, kind="stable")[:, : n - 1]
    return labels[order] == labels[:, None]


def retrieval_metrics(scores: np.ndarray, labels: np.ndarray, ks: tuple[int, ...] = (1, 5)) -> dict[str, float]:
    """MAP, P@k (and MP@1 of paper 000: 1 / rank of the first hit) and P@N over all queries.

    AP divides by the number of relevant clips (paper 000 eq. 3). ``map_p004`` is paper 004's
    "MAP" (eq. 13): the mean of P@K for K = 1..N, N the number of relevant clips. Queries without
    any relevant clip are skipped.
    """
    labels = np.asarray(labels)
    hits = _ranked_hits(scores, labels)
    n_rel = hits.sum(axis=1)
    keep = n_rel > 0
    hits, n_rel = hits[keep], n_rel[keep]
    ranks = np.arange(1, hits.shape[1] + 1)
    precision = np.cumsum(hits, axis=1) / ranks
    ap = (precision * hits).sum(axis=1) / n_rel
    first = np.argmax(hits, axis=1) + 1
    p_at_n = np.array([precision[i, n_rel[i] - 1] for i in range(len(n_rel))])
    p004 = np.array([precision[i, : n_rel[i]].mean() for i in range(len(n_rel))])
    out = {"map": float(ap.mean()), "mp@1": float((1.0 / first).mean()), "precision@n": float(p_at_n.mean()),
           "map_p004": float(p004.mean())}
    for k in ks:
        out[f"precision@{k}"] = float(precision[:, min(k, hits.shape[1]) - 1].mean())
    return out
