"""The tie rule that makes scatter/merge over shards exactly equal to one index.

One index returns tied neighbours "in no particular order", so where ties straddle the k-th
place, which of them make the list depends on row layout, and a sharded search could not
promise the same list. The cluster therefore ranks by a total order:

    binary: (Hamming distance ascending, segment id ascending)
    float:  (inner-product similarity descending, segment id ascending)

:func:`ordered_topk` returns exactly the first k under that order from any index (it widens
its request until no tie can straddle the cut), and :func:`merge_topk` merges per-shard lists
under the same order. The top k of a union is the top k of the shards' top-k lists, so
``merge_topk([ordered_topk(shard) ...]) == ordered_topk(one index over all of it)``, ties
included. Float similarities of the returned rows are recomputed in a shape-independent way
(:func:`exact_similarities`): BLAS blocks a product differently for different row counts and
moves the last bit, which would otherwise make shard and single-index scores differ.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.index.base import PAD_ID


def _sort_rows(scores: np.ndarray, ids: np.ndarray, ascending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by (score, id) under the rule; padding (PAD_ID) goes last."""
    key = scores.astype(np.float64) if ascending else -scores.astype(np.float64)
    key = np.where(ids == PAD_ID, np.inf, key)
    if scores.shape[1] == 0:
        return scores, ids
    order = np.stack([np.lexsort((i, s)) for s, i in zip(key, ids)])
    return np.take_along_axis(scores, order, axis=1), np.take_along_axis(ids, order, axis=1)


FLOAT_MARGIN = 1e-4  # > any float32 rounding difference of a unit-vector inner product between two kernels


def exact_similarities(query: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Inner products computed the same way whatever the batch: float64 products (exact for float32
    inputs), summed along each row, rounded once to float32. BLAS may block a product differently
    for different matrix shapes, which moves the last bit; this does not."""
    return (vectors.astype(np.float64) * query.astype(np.float64)[None, :]).sum(axis=1).astype(np.float32)


def ordered_topk(index: Any, queries: np.ndarray, k: int, ascending: bool, pad_value: Any) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` with ties at the cut resolved by segment id (see the module doc).

    Binary distances are integers: the request widens until the last fetched distance differs
    from the k-th. Float similarities widen until the last is ``FLOAT_MARGIN`` below the k-th,
    then are recomputed by :func:`exact_similarities`, so the ranking does not depend on how
    the kernel blocked the rows of this particular index.
    """
    total = len(index)
    width = min(k, total)
    if width == 0:
        return index.search(queries, k)
    margin = 0 if ascending else FLOAT_MARGIN
    ask = min(total, 2 * k + 8)
    while True:
        scores, ids = index.search(queries, ask)
        if ask >= total:
            break
        gap = (scores[:, ask - 1] - scores[:, width - 1]) if ascending else (scores[:, width - 1] - scores[:, ask - 1])
        if not np.any(gap <= margin):
            break
        ask = min(total, ask * 4)
    if not ascending:
        for row in range(len(queries)):
            valid = ids[row] >= 0
            scores[row, valid] = exact_similarities(queries[row], index.reconstruct(ids[row, valid]))
    scores, ids = _sort_rows(scores, ids, ascending)
    out_scores = np.full((len(queries), k), pad_value, dtype=scores.dtype)
    out_ids = np.full((len(queries), k), PAD_ID, dtype=np.int64)
    out_scores[:, :width], out_ids[:, :width] = scores[:, :width], ids[:, :width]
    return out_scores, out_ids


def merge_topk(parts: list[tuple[np.ndarray, np.ndarray]], k: int, ascending: bool) -> tuple[np.ndarray, np.ndarray]:
    """Merge per-shard ordered top-k lists into the global top k under the same rule."""
    scores = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate([p[1] for p in parts], axis=1)
    scores, ids = _sort_rows(scores, ids, ascending)
    return scores[:, :k], ids[:, :k]
