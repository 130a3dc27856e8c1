"""Ranking metrics from the project's papers, one per-query function each.

Conventions shared by every function here:

* ``ranking`` is the ranked list of document ids for one query, best first (already cut to
  whatever depth the system returned).
* ``qrels`` maps document id -> graded gain for that query. A document is *relevant* when its
  gain is > 0; documents missing from ``qrels`` have gain 0 (the TREC convention).
* Per-query functions return a plain ``float``; :func:`evaluate` returns one ``np.ndarray`` of
  per-query values per metric, and aggregation (usually the mean) is left to the caller, as in
  ranx. Queries with no relevant documents score 0 on recall-type metrics, like trec_eval.

Metric names accepted by :func:`evaluate` (``k``/``K`` is a positive integer):
``map``, ``map@K``, ``MP@1``, ``mrr``, ``P@K``, ``P@N``, ``mean_P@1..N``, ``recall@K``, ``R@K``,
``ndcg@K``, ``AG@K``, ``wP@K``, ``mean_rank``, ``median_rank``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Ranking = Sequence[str]
Qrels = Mapping[str, float]


def _relevant_flags(ranking: Ranking, qrels: Qrels, k: int | None = None) -> np.ndarray:
    top = ranking if k is None else ranking[:k]
    return np.fromiter((qrels.get(doc, 0) > 0 for doc in top), dtype=bool, count=len(top))


def _n_relevant(qrels: Qrels) -> int:
    return sum(1 for gain in qrels.values() if gain > 0)


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"cut-off k must be >= 1, got {k}")


# ---------------------------------------------------------------- binary relevance


def precision_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """P@k = |relevant in top k| / k (paper 000 MP@K per query; paper 004 eq. 12 per query).

    Edge cases: the denominator is always ``k``, even when the system returned fewer than k
    documents (trec_eval ``P_k``); an empty ranking scores 0.
    """
    _check_k(k)
    return float(_relevant_flags(ranking, qrels, k).sum()) / k


def recall_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """recall@k = |relevant in top k| / |relevant|; 0 when the query has no relevant document."""
    _check_k(k)
    n_rel = _n_relevant(qrels)
    return float(_relevant_flags(ranking, qrels, k).sum()) / n_rel if n_rel else 0.0


def average_precision(ranking: Ranking, qrels: Qrels, k: int | None = None) -> float:
    """AP = (1/m) * sum over relevant hits at rank i of P@i (paper 000 eq. 3).

    ``m`` is the number of relevant documents *in the qrels* (trec_eval and ranx), not
    ``min(k, m)`` as sentence-transformers uses: relevant documents never retrieved count as
    precision 0. With ``k``, only the top k ranks are read (``map@k``). 0 when m = 0.
    """
    n_rel = _n_relevant(qrels)
    if n_rel == 0:
        return 0.0
    flags = _relevant_flags(ranking, qrels, k)
    if not flags.any():
        return 0.0
    hits = np.cumsum(flags)
    ranks = np.arange(1, len(flags) + 1)
    return float((hits[flags] / ranks[flags]).sum()) / n_rel


def precision_at_first_hit(ranking: Ranking, qrels: Qrels) -> float:
    """MP@1 of paper 000 per query: precision at the first relevant hit = 1 / rank of that hit.

    This is the reciprocal rank (paper 000: "MP@1 of about 0.3 means the first positive hit is
    on average at rank 3"). 0 when nothing relevant was retrieved.
    """
    flags = _relevant_flags(ranking, qrels)
    if not flags.any():
        return 0.0
    return 1.0 / (int(np.argmax(flags)) + 1)


def precision_at_n(ranking: Ranking, qrels: Qrels) -> float:
    """P@N of paper 004: precision in the top N, N = number of relevant documents (R-precision).

    0 when the query has no relevant document.
    """
    n_rel = _n_relevant(qrels)
    return precision_at_k(ranking, qrels, n_rel) if n_rel else 0.0


def mean_precision_to_n(ranking: Ranking, qrels: Qrels) -> float:
    """The "MAP" of paper 004 eq. 13 per query: (1/N) * sum_{K=1..N} P@K, N = |relevant|.

    Unlike AP, every rank 1..N contributes, relevant or not. 0 when N = 0.
    """
    n_rel = _n_relevant(qrels)
    if n_rel == 0:
        return 0.0
    flags = _relevant_flags(ranking, qrels, n_rel).astype(float)
    flags = np.pad(flags, (0, n_rel - len(flags)))  # a short ranking has no hits below its end
    precisions = np.cumsum(flags) / np.arange(1, n_rel + 1)
    return float(precisions.mean())


def hit_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """R@K of text-to-image retrieval (open_clip): 1 if any relevant document is in the top K."""
    _check_k(k)
    return float(_relevant_flags(ranking, qrels, k).any())


def first_relevant_rank(ranking: Ranking, qrels: Qrels) -> float:
    """1-based rank of the first relevant document; ``math.inf`` when none was retrieved.

    Aggregate with the median (median rank) or the mean (mean rank, infinite if any query missed).
    """
    flags = _relevant_flags(ranking, qrels)
    return float(np.argmax(flags) + 1) if flags.any() else math.inf


# ---------------------------------------------------------------- graded relevance


def average_gain_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """AG@k = (1/k) * sum of the gains of the top k documents (paper 001, MIREX AMS).

    The denominator is always ``k``; unjudged documents have gain 0. With binary gains this is P@k.
    """
    _check_k(k)
    return float(sum(qrels.get(doc, 0) for doc in ranking[:k])) / k


def weighted_precision_at_k(
    ranking: Ranking,
    qrels: Qrels,
    k: int = 30,
    label_weights: Mapping[float, float] | None = None,
) -> float:
    """Weighted precision@k of paper 003: (1/k) * sum_{i<=k} rel(q, d_i).

    ``rel`` maps a graded label to a weight; the default follows paper 003 with labels 2
    (RELEVANT_PLUS) -> 1.0, 1 (RELEVANT_MINUS) -> 0.5, 0 (IRRELEVANT) -> 0. Labels absent from
    ``label_weights`` weigh 0. Denominator is always ``k``.
    """
    _check_k(k)
    weights = {2: 1.0, 1: 0.5, 0: 0.0} if label_weights is None else label_weights
    return float(sum(weights.get(qrels.get(doc, 0), 0.0) for doc in ranking[:k])) / k


def ndcg_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """nDCG@k = DCG@k / IDCG@k with DCG@k = sum_{i<=k} gain_i / log2(i + 1).

    Linear gains (trec_eval ``ndcg_cut`` and ranx's default). IDCG sorts all qrels gains in
    decreasing order. 0 when the query has no positive gain. Negative gains count as 0.
    """
    _check_k(k)
    discounts = 1.0 / np.log2(np.arange(2, k + 2))
    gains = np.array([max(qrels.get(doc, 0), 0) for doc in ranking[:k]], dtype=float)
    ideal = np.sort(np.array([g for g in qrels.values() if g > 0], dtype=float))[::-1][:k]
    if ideal.size == 0:
        return 0.0
    return float((gains * discounts[: gains.size]).sum() / (ideal * discounts[: ideal.size]).sum())


# ---------------------------------------------------------------- time segments (paper 002)

Segment = tuple[str, float, float]  # (item, start, end) in seconds
Span = tuple[float, float]


def temporal_iou(a: Span, b: Span) -> float:
    """Intersection over union of two time spans; 0 for disjoint or degenerate spans."""
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 and inter > 0 else 0.0


def segment_relevance(segment: Segment, truth: Mapping[str, Sequence[Span]]) -> float:
    """r(segment) = max IoU between the segment and the ground-truth spans of the same item."""
    item, start, end = segment
    return max((temporal_iou((start, end), span) for span in truth.get(item, ())), default=0.0)


def recall_at_k_theta(segments: Sequence[Segment], truth: Mapping[str, Sequence[Span]], k: int, theta: float) -> float:
    """R@K,theta (paper 002 eq. 1, one query): 1 if any of the top K segments has IoU > theta.

    Strict ``>`` as in the paper's eq. 1 (some toolkits use >=; results differ only at equality).
    """
    _check_k(k)
    return float(any(segment_relevance(seg, truth) > theta for seg in segments[:k]))


def axiou_at_k(segments: Sequence[Segment], truth: Mapping[str, Sequence[Span]], k: int) -> float:
    """AxIoU@K (paper 002 eq. 10, one query) = (1/K) * sum_{k=1..K} max_{j<=k} r(segment_j).

    r is :func:`segment_relevance`. Ranks past the end of a short list repeat the running
    maximum (the max over j <= k only sees the segments that exist), which is the natural
    reading of eq. 10; an empty list scores 0.
    """
    _check_k(k)
    relevance = [segment_relevance(seg, truth) for seg in segments[:k]]
    if not relevance:
        return 0.0
    running = np.maximum.accumulate(np.array(relevance))
    running = np.pad(running, (0, k - running.size), mode="edge")
    return float(running.mean())


# ---------------------------------------------------------------- batch evaluation

MetricFn = Callable[[Ranking, Qrels], float]


def metric_function(name: str) -> MetricFn:
    """Per-query function for a metric name such as ``map``, ``P@5`` or ``ndcg@10``.

    Raises:
        ValueError: for an unknown name or a malformed cut-off.
    """
    if name == "map":
        return average_precision
    if name in {"MP@1", "mrr"}:
        return precision_at_first_hit
    if name == "P@N":
        return precision_at_n
    if name == "mean_P@1..N":
        return mean_precision_to_n
    if name in {"mean_rank", "median_rank"}:
        return first_relevant_rank
    base, _, cutoff = name.partition("@")
    if not cutoff.isdigit() or int(cutoff) < 1 or base not in {"map", "P", "recall", "R", "ndcg", "AG", "wP", "MP"}:
        raise ValueError(f"unknown metric {name!r}; expected e.g. map, P@5, ndcg@10, recall@10, AG@5")
    k = int(cutoff)
    table: dict[str, Callable[[Ranking, Qrels, int], float]] = {
        "map": average_precision,
        "P": precision_at_k,
        "MP": precision_at_k,  # paper 000's MP@K is the mean of P@K over queries
        "recall": recall_at_k,
        "R": hit_at_k,
        "ndcg": ndcg_at_k,
        "AG": average_gain_at_k,
        "wP": weighted_precision_at_k,
    }
    fn = table[base]
    return lambda ranking, qrels: fn(ranking, qrels, k)


def evaluate(
    rankings: Mapping[str, Ranking],
    qrels: Mapping[str, Qrels],
    metrics: Sequence[str],
) -> tuple[list[str], dict[str, np.ndarray]]:
    """Per-query values of several metrics.

    Queries are those present in ``qrels`` (trec_eval's default): a query the run has no
    answer for gets an empty ranking and scores 0; run queries absent from the qrels are ignored.

    Returns:
        (query ids in sorted order, {metric name: array of per-query values in that order}).
    """
    qids = sorted(qrels)
    results = {}
    for name in metrics:
        fn = metric_function(name)
        results[name] = np.array([fn(rankings.get(q, []), qrels[q]) for q in qids], dtype=float)
    return qids, results


def aggregate(per_query: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean over queries for each metric, except ``median_rank`` (median over queries).

    ``mean_rank`` is infinite when any query retrieved nothing relevant.
    """
    out = {}
    for name, values in per_query.items():
        if values.size == 0:
            out[name] = 0.0
        elif name == "median_rank":
            out[name] = float(np.median(values))
        else:
            out[name] = float(values.mean())
    return out
