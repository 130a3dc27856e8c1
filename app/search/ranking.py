"""Pure ranking helpers: distances, segment-to-item grouping, non-maximum suppression, the response rows.

Kept free of I/O so they can be checked against hand-computed cases.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.eval.metrics import temporal_iou  # one definition for the service and the evaluation
from app.index import cosine_distance as similarity_to_distance  # one clipping rule for every float path

_POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int32)


def hamming(queries: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """(nq, n) Hamming distances between packed codes (uint8 rows)."""
    return _POPCOUNT[np.bitwise_xor(queries[:, None, :], codes[None, :, :])].sum(axis=2)


def cosine_distance(queries: np.ndarray, floats: np.ndarray) -> np.ndarray:
    """(nq, n) 1 - cosine similarity of unit-length rows, in [0, 2] (see ``app.index.cosine_distance``)."""
    return similarity_to_distance(queries @ floats.T)


def mean_of_nearest(pairs: np.ndarray) -> float:
    """The ``mean`` item rule: each query window's distance to its nearest segment of the item,
    averaged over the query's windows (rows of ``pairs``)."""
    return float(pairs.min(axis=1).mean())


def score_of(distance: float, mode: str, bits: int) -> float:
    """Similarity in [0, 1] for Hamming (1 - d / bits), in [-1, 1] for cosine (1 - d)."""
    return 1.0 - distance / bits if mode == "binary" else 1.0 - distance


@dataclass
class ItemHit:
    """An item with its best distance and the segments that matched."""

    item_id: str
    distance: float
    segments: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, distance)
    best_segment_id: int = -1
    item: dict | None = None  # the catalog row, when the search was asked to fetch it
    vector: np.ndarray | None = None  # the best segment's float vector, where the search read it (two-stage re-rank)


def group_by_item(segment_distance: dict[int, float], segment_items: dict[int, tuple[str, float, float]]) -> list[ItemHit]:
    """Items ranked by their best segment: an item's distance is the minimum over its segments.

    Ties are broken by item id so that rankings are deterministic.
    """
    hits: dict[str, ItemHit] = {}
    for sid, dist in segment_distance.items():
        if sid not in segment_items:
            continue  # deleted since the scan
        item_id, start, end = segment_items[sid]
        hit = hits.get(item_id)
        if hit is None:
            hit = hits[item_id] = ItemHit(item_id, dist, best_segment_id=sid)
        if dist < hit.distance:
            hit.distance, hit.best_segment_id = dist, sid
        hit.segments.append((start, end, dist))
    return sorted(hits.values(), key=lambda h: (h.distance, h.item_id))


def non_maximum_suppression(segments: list[tuple[float, float, float]], iou: float, limit: int) -> list[tuple[float, float, float]]:
    """Best segments that do not overlap a better one by more than ``iou``.

    Args:
        segments: (start, end, distance) triples; smaller distance is better.
        iou: a segment whose temporal IoU with an already kept one exceeds this is dropped.
        limit: most segments returned.
    """
    kept: list[tuple[float, float, float]] = []
    for seg in sorted(segments, key=lambda s: (s[2], s[0])):
        if all(temporal_iou(seg[:2], k[:2]) <= iou for k in kept):
            kept.append(seg)
            if len(kept) == limit:
                break
    return kept


def to_results(hits: list[ItemHit], items: dict[str, dict[str, Any]], mode: str, bits: int, rerank_scores: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """The response rows: rank, id, score, distance, metadata, segments (and stage scores)."""
    results = []
    for rank, hit in enumerate(hits, start=1):
        stage1 = score_of(hit.distance, mode, bits)
        row: dict[str, Any] = {
            "id": hit.item_id,
            "rank": rank,
            "score": rerank_scores[hit.item_id] if rerank_scores else stage1,
            "distance": hit.distance,
            "metadata": items.get(hit.item_id, {}).get("metadata", {}),
            "segments": [{"start": s, "end": e, "distance": d} for s, e, d in hit.segments],
        }
        if rerank_scores:
            row["stage1_score"] = stage1
            row["rerank_score"] = rerank_scores[hit.item_id]
        results.append(row)
    return results
