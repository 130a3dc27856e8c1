"""Query -> ranked items: candidate scan, grouping by item, filters, occurrences, re-ranking.

Modes:
  binary     Hamming distance over packed codes.
  float      cosine distance (1 - inner product of unit vectors).
  two_stage  Hamming shortlist of k x oversample segments, then exact cosine on those.
An item's distance combines its segments' distances to the query's windows (``item_distance``):
``mean`` (the default) averages, over the query's windows, each window's distance to its nearest
segment of the item, so every part of a multi-window query must match somewhere; ``min`` takes the
single nearest pair. For a one-window query the two are the same. Each result lists its best
segments after non-maximum suppression: every place a term occurs in a long recording, not only
the best one.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from app.errors import InvalidInput
from app.index import AdaptiveBinaryIndex
from app.search.depth import first_depth as _first_depth
from app.search.depth import map_top as _map_top
from app.search.ranking import (
    ItemHit,
    cosine_distance,
    group_by_item,
    hamming,
    mean_of_nearest,
    non_maximum_suppression,
    similarity_to_distance,
)
from app.search.scan import SharedScan
from app.storage.catalog import Catalog, Collection
from app.storage.index_store import CollectionIndex


@dataclass
class Query:
    """A query as vectors: one row per query window (or one row for an image or a text)."""

    floats: np.ndarray
    codes: np.ndarray
    text: str | None = None
    exclude_item: str | None = None


@dataclass
class SearchOptions:
    k: int = 10
    mode: str = "two_stage"
    oversample: int = 10
    filter: dict[str, Any] = field(default_factory=dict)
    max_distance: float | None = None
    segments_per_item: int = 3
    nms_iou: float = 0.3
    rerank: bool = True
    rerank_top: int = 100
    item_distance: str = "mean"  # "mean" | "min": how an item combines the query windows' distances
    # segments a first round scans per wanted item (None: the collection's rule, app/search/depth.py)
    depth_per_item: int | None = None
    nprobe: int | None = None  # IVF lists to scan (None: the collection's default); ignored by flat


@dataclass
class Scans:
    """The shared scanners of one collection's indices."""

    binary: SharedScan | None
    float: SharedScan | None


def check_mode(collection: Collection, mode: str) -> None:
    need = {"binary": {"binary"}, "float": {"float"}, "two_stage": {"binary", "float"}}[mode]
    missing = need - set(collection.index_kinds)
    if missing:
        raise InvalidInput(
            f"mode {mode!r} needs a {' and '.join(sorted(need))} index; collection {collection.name!r} "
            f"has {list(collection.index_kinds)}"
        )


# Indices whose scanned vectors take at most this many bytes are scanned on the same worker
# thread that ranks the results: such a scan takes a fraction of a millisecond (10^5 x 256-bit
# codes: 3.2 MB), less than the hand-offs to and from the shared scanner's thread. Larger
# indices go through the shared scan, where concurrent queries share one pass over memory.
INLINE_SCAN_BYTES = 8 << 20


async def search(
    catalog: Catalog,
    collection: Collection,
    index: CollectionIndex,
    scans: Scans,
    query: Query,
    options: SearchOptions,
    *,
    with_items: bool = False,
    then: Callable[[list[ItemHit]], Any] | None = None,
) -> Any:
    """Ranked items for a query (no re-ranking: ``then`` may do it).

    With ``with_items`` each hit also carries its catalog row (``hit.item``), read in the same
    worker-thread call as the ranking: one thread hop per scan depth, not one per lookup.
    ``then``: the caller's next step, given the final hits in that same worker-thread call; its
    result is returned instead of the hits (a text search's re-rank: no hop back and out again).
    """
    check_mode(collection, options.mode)
    total = len(index)
    if total == 0:
        return [] if then is None else then([])
    depth = _first_depth(collection, query, options, total)
    if _scanned_bytes(index, options, depth) <= INLINE_SCAN_BYTES:
        return await asyncio.to_thread(_search_here, catalog, collection, index, query, options, with_items, then)
    while True:
        kind, k = _scan_plan(index, options, depth)
        scan = scans.binary if kind == "binary" else scans.float
        assert scan is not None
        if kind == "binary":
            scores, ids = await scan.search(query.codes, k, nprobe=_nprobe(index, options))
        else:
            scores, ids = await scan.search(query.floats, k)
        vectors = _vectors_wanted(collection)
        args = (index, query, options, depth, scores, ids, _map_top(collection, query, options, depth), vectors)
        if options.mode == "two_stage" and getattr(index.float, "MAPPED", False):
            # the shortlist's rows may have to be read from disk: not on the event loop
            distances = await asyncio.to_thread(_segment_distances, *args)
        else:
            distances = _segment_distances(*args)
        # every item beyond the scanned depth is at least as far as the worst scanned segment,
        # so the top k are final once k items are found or the whole index was scanned
        done, hits = await asyncio.to_thread(_rank_then, then, catalog, collection, query, options, distances, depth >= total, with_items, vectors)
        if done:
            return hits
        depth = min(total, depth * 4)


def _rank_then(then: Callable[[list[ItemHit]], Any] | None, *args: Any) -> tuple[bool, Any]:
    """:func:`_rank`, and ``then`` of its hits once they are final: (final, the result)."""
    hits = _rank(*args)
    if hits is None:
        return False, None
    return True, hits if then is None else then(hits)


def _search_here(
    catalog: Catalog, collection: Collection, index: CollectionIndex, query: Query, options: SearchOptions, with_items: bool,
    then: Callable[[list[ItemHit]], Any] | None = None,
) -> Any:
    """:func:`search` for a small index, entirely on the calling (worker) thread."""
    total = len(index)
    depth = _first_depth(collection, query, options, total)
    while True:
        kind, k = _scan_plan(index, options, depth)
        if kind == "binary":
            assert index.binary is not None
            nprobe = _nprobe(index, options)
            scores, ids = index.binary.search(query.codes, k) if nprobe is None else index.binary.search(query.codes, k, nprobe=nprobe)
        else:
            assert index.float is not None
            scores, ids = index.float.search(query.floats, k)
        vectors = _vectors_wanted(collection)
        distances = _segment_distances(index, query, options, depth, scores, ids, _map_top(collection, query, options, depth), vectors)
        hits = _rank(catalog, collection, query, options, distances, depth >= total, with_items, vectors)
        if hits is not None:
            return hits if then is None else then(hits)
        depth = min(total, depth * 4)


def _vectors_wanted(collection: Collection) -> dict[int, np.ndarray] | None:
    """A dict for the shortlist's float vectors where re-ranking may read them (an image collection), else None."""
    return {} if collection.modality == "image" else None


def _nprobe(index: CollectionIndex, options: SearchOptions) -> int | None:
    """The query's nprobe for an index that may hold an IVF: in process, or cluster shards (``takes_nprobe``)."""
    takes = isinstance(index.binary, AdaptiveBinaryIndex) or getattr(index.binary, "takes_nprobe", False)
    return options.nprobe if takes else None


def _scanned_bytes(index: CollectionIndex, options: SearchOptions, depth: int) -> int:
    """Bytes the first round reads: all codes or floats for an exact scan, the probed lists for an IVF."""
    if options.mode == "float":
        return len(index) * (index.float.dim if index.float is not None else 0) * 4
    if isinstance(index.binary, AdaptiveBinaryIndex):
        return index.binary.scan_bytes(_scan_plan(index, options, depth)[1], options.nprobe)
    return len(index) * (index.binary.bits if index.binary is not None else 0) // 8


def _rank(
    catalog: Catalog, collection: Collection, query: Query, options: SearchOptions,
    distances: dict[int, float], last: bool, with_items: bool, vectors: dict[int, np.ndarray] | None = None,
) -> list[ItemHit] | None:
    """Segments -> the final top-k items with their occurrences; None when k were not found
    and a deeper scan may find more. Runs on a worker thread (catalog reads). An image hit takes its
    segment's float vector from ``vectors`` (the two-stage shortlist's), which re-ranking reads."""
    segment_items = catalog.segment_items(collection.name, np.fromiter(distances, np.int64, len(distances)))
    hits = [h for h in group_by_item(distances, segment_items) if h.item_id != query.exclude_item]
    # an item's nearest pair is a lower bound of its mean distance, so this cut is safe for both rules
    if options.max_distance is not None:
        hits = [h for h in hits if h.distance <= options.max_distance]
    if options.filter and hits:
        hits = _apply_filter(catalog, collection.name, hits, options.filter)
    mean_rule = collection.modality == "audio" and _averages_windows(query, options)
    if mean_rule:
        hits = _rescored_by_mean(catalog, collection, query, options, hits)
        if options.max_distance is not None:
            hits = [h for h in hits if h.distance <= options.max_distance]
    if len(hits) < options.k and not last:
        return None
    hits = hits[: options.k]
    if vectors:  # an image collection's (_vectors_wanted): re-ranking reads them
        for hit in hits:
            hit.vector = vectors.get(hit.best_segment_id)
    if collection.modality == "audio" and not mean_rule:  # the mean rule located its pool already
        _locate(catalog, collection, query, options, hits)  # an image is one segment: nothing to locate
    if with_items and hits:
        items = catalog.items_by_id(collection.name, [h.item_id for h in hits])
        for hit in hits:
            hit.item = items.get(hit.item_id, {})
    return hits


def _averages_windows(query: Query, options: SearchOptions) -> bool:
    """Whether items are ranked by the mean rule: asked for, and the query has several windows
    (for one window the mean is the minimum, and the scan's distances are already exact)."""
    return options.item_distance == "mean" and len(query.floats) > 1


# The mean rule re-scores the items the scan found, nearest pair first: at most this many times k
# of them, and once this many of their windows have been read, no further chunk of k (a 10-minute
# recording has 1,200 windows; the first k items are always read, as their occurrences need them).
# An item outside the pool has no window among the nearest segments to any query window, so its
# mean distance is almost surely worse than the pool's.
MEAN_POOL_ITEMS = 4
MEAN_POOL_WINDOWS = 4096


def _rescored_by_mean(catalog: Catalog, collection: Collection, query: Query, options: SearchOptions, hits: list[ItemHit]) -> list[ItemHit]:
    """The pool's items with their exact mean distances and occurrences, nearest first."""
    pool = hits[: options.k * MEAN_POOL_ITEMS]
    located: list[ItemHit] = []
    windows = 0
    for start in range(0, len(pool), options.k):
        chunk = pool[start : start + options.k]
        windows += _locate(catalog, collection, query, options, chunk)
        located += chunk
        if windows >= MEAN_POOL_WINDOWS:
            break
    return sorted((h for h in located if h.distance != float("inf")), key=lambda h: (h.distance, h.item_id))


def _scan_plan(index: CollectionIndex, options: SearchOptions, depth: int) -> tuple[str, int]:
    """Which index one round scans, and how deep: binary and two_stage scan the codes (two_stage
    a shortlist of depth x oversample), float the floats."""
    if options.mode == "float":
        return "float", depth
    if options.mode == "binary":
        return "binary", depth
    return "binary", min(len(index), depth * options.oversample)


def _segment_distances(
    index: CollectionIndex, query: Query, options: SearchOptions, depth: int, scores: np.ndarray, ids: np.ndarray,
    map_top: int | None = None, vectors: dict[int, np.ndarray] | None = None,
) -> dict[int, float]:
    """segment id -> distance (min over query windows) for the ``depth`` nearest per window, cut to
    the ``map_top`` nearest and every segment tied with the last of them (ties are then broken by item
    id, as without the cut). Two-stage: ``vectors`` (when given) receives the kept segments' float
    vectors, read for the exact distances, so that re-ranking need not read them again."""
    best: dict[int, float] = {}
    if options.mode == "binary":
        _merge(best, ids, scores.astype(np.float64))
    elif options.mode == "float":
        _merge(best, ids, similarity_to_distance(scores))
    else:
        assert index.float is not None
        # a concurrent delete may have removed a shortlisted segment since the scan
        candidates, vectors_read = index.float.reconstruct_present(_sorted_distinct(ids[ids >= 0]))
        exact = cosine_distance(query.floats, vectors_read).min(axis=0)  # min over query windows
        # keep the best `depth` after re-ranking: the shortlist is oversampled for recall, but
        # mapping all of it to items would cost more than the scan itself
        rows = np.arange(len(candidates))  # each candidate's row of vectors_read
        if len(exact) > depth:
            rows = np.argpartition(exact, depth - 1)[:depth]
            candidates, exact = candidates[rows], exact[rows]
        if len(query.floats) == 1:  # a text, an image, a 1-s clip: every query of issue 35's targets
            return _one_window_distances(candidates, exact, rows, vectors_read, map_top, vectors)
        _merge(best, candidates, exact)
    if map_top is not None and len(best) > map_top:
        values = np.fromiter(best.values(), np.float64, len(best))
        cutoff = np.partition(values, map_top - 1)[map_top - 1]
        best = {sid: d for sid, d in best.items() if d <= cutoff}
    if vectors is not None and options.mode == "two_stage" and len(query.floats) == 1:
        row_of = dict(zip(candidates.tolist(), rows.tolist()))  # one window: each candidate once
        vectors.update((sid, vectors_read[row_of[sid]]) for sid in best)
    return best


def _one_window_distances(
    candidates: np.ndarray, exact: np.ndarray, rows: np.ndarray, vectors_read: np.ndarray,
    map_top: int | None, vectors: dict[int, np.ndarray] | None,
) -> dict[int, float]:
    """The two-stage tail of a one-window query in numpy: the dict, in its order, that :func:`_merge` and the
    ``map_top`` cut build in Python loops (a text query's 400 candidates). Its candidates are distinct."""
    keep = exact < np.inf  # _merge drops what is not below its missing entry's inf (NaN, inf)
    if not keep.all():
        candidates, exact, rows = candidates[keep], exact[keep], rows[keep]
    if map_top is not None and len(exact) > map_top:
        values = exact.astype(np.float64)  # the cut compared the merged Python floats
        cutoff = np.partition(values, map_top - 1)[map_top - 1]
        keep = values <= cutoff
        candidates, exact, rows = candidates[keep], exact[keep], rows[keep]
    ids = candidates.tolist()
    if vectors is not None:
        vectors.update(zip(ids, vectors_read[rows]))
    return dict(zip(ids, exact.tolist()))


def _sorted_distinct(ids: np.ndarray) -> np.ndarray:
    """``np.unique(ids)`` by sorting: numpy 2's hash-based unique took 0.53 ms for a 4,000-long
    shortlist against 0.05 ms here, and sorted ids make the float index's id lookup ~2.7x faster."""
    ordered = np.sort(ids.ravel())
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def _merge(best: dict[int, float], ids: np.ndarray, dist: np.ndarray) -> None:
    for sid, d in zip(ids.ravel().tolist(), dist.ravel().tolist()):
        if sid >= 0 and d < best.get(sid, np.inf):
            best[sid] = d


def _apply_filter(catalog: Catalog, collection: str, hits: list[ItemHit], wanted: dict[str, Any]) -> list[ItemHit]:
    items = catalog.items_by_id(collection, [h.item_id for h in hits])
    return [h for h in hits if all(items.get(h.item_id, {}).get("metadata", {}).get(k) == v for k, v in wanted.items())]


def _locate(catalog: Catalog, collection: Collection, query: Query, options: SearchOptions, hits: list[ItemHit]) -> int:
    """Give each hit its occurrences (all its windows' exact distances, after NMS) and its exact
    distance under the item rule; returns how many windows were read."""
    mode = "binary" if options.mode == "binary" else "float"
    # every hit's windows in one catalog round trip (a query per hit cost ~0.1 ms each)
    segments_of = catalog.segments_of_items(collection.name, [h.item_id for h in hits], collection.dim, collection.bits)
    mean_rule = _averages_windows(query, options)
    windows = 0
    for hit in hits:
        if hit.item_id not in segments_of:  # deleted since the scan: nothing to locate or average
            hit.segments = []
            if mean_rule:
                hit.distance = float("inf")
            continue
        _, times, floats, codes = segments_of[hit.item_id]
        windows += len(times)
        # (query windows, this item's windows) distances
        pairs = hamming(query.codes, codes).astype(np.float64) if mode == "binary" else cosine_distance(query.floats, floats)
        segments = [(float(s), float(e), float(d)) for (s, e), d in zip(times, pairs.min(axis=0))]
        if options.max_distance is not None:
            segments = [s for s in segments if s[2] <= options.max_distance]
        hit.segments = non_maximum_suppression(segments, options.nms_iou, options.segments_per_item)
        if mean_rule:
            hit.distance = mean_of_nearest(pairs)
        elif hit.segments:
            hit.distance = hit.segments[0][2]
    return windows
