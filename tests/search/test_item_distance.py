"""How an audio item's distance combines a multi-window query's windows (``item_distance``).

``mean``: each query window's distance to its nearest segment of the item, averaged over the query
windows; ``min``: the nearest pair. Checked against brute-force rankings computed here.
"""

import numpy as np
import pytest

from app.search import pipeline
from app.search.pipeline import Query, SearchOptions
from app.search.ranking import hamming
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex

DIM, BITS = 8, 64


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _codes(floats: np.ndarray, projection: np.ndarray) -> np.ndarray:
    """Sign codes of a fixed projection, packed as the service packs them (FAISS bit order)."""
    return np.packbits(floats @ projection > 0, axis=1, bitorder="little")


def _collection(tmp_path, items: dict[str, np.ndarray], projection: np.ndarray):
    catalog = Catalog(tmp_path / "c.db")
    collection = Collection("sounds", "audio", "test", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 0.0)
    catalog.create_collection(collection)
    catalog.upsert_items("sounds", [
        NewItem(item_id, None, None, None, {}, np.stack([np.arange(len(f)) * 0.5, np.arange(len(f)) * 0.5 + 1.0], axis=1),
                f, _codes(f, projection))
        for item_id, f in items.items()
    ])
    return catalog, collection, CollectionIndex.open(collection, catalog, tmp_path, shards=2)


def _brute_force(query: Query, items: dict[str, np.ndarray], projection: np.ndarray, mode: str, rule: str, k: int):
    ranked = []
    for item_id, floats in items.items():
        if mode == "binary":
            pairs = hamming(query.codes, _codes(floats, projection)).astype(np.float64)
        else:
            pairs = 1.0 - query.floats.astype(np.float64) @ floats.astype(np.float64).T
        distance = pairs.min(axis=1).mean() if rule == "mean" else pairs.min()
        ranked.append((float(distance), item_id))
    return [(item_id, d) for d, item_id in sorted(ranked)[:k]]


@pytest.fixture
def random_items(tmp_path):
    """10 items of 1-4 windows (30 segments at most: the first scan round covers them all)."""
    rng = np.random.default_rng(3)
    projection = rng.standard_normal((DIM, BITS)).astype(np.float32)
    items = {f"item{i}": _unit(rng.standard_normal((1 + i % 4, DIM))) for i in range(10)}
    return (*_collection(tmp_path, items, projection), items, projection, rng)


@pytest.mark.parametrize("mode", ["binary", "float", "two_stage"])
@pytest.mark.parametrize("rule", ["mean", "min"])
def test_multi_window_queries_rank_items_as_the_brute_force_rule(random_items, mode, rule):
    catalog, collection, index, items, projection, rng = random_items
    floats = _unit(rng.standard_normal((3, DIM)))
    query = Query(floats=floats, codes=_codes(floats, projection))
    options = SearchOptions(k=4, mode=mode, item_distance=rule)
    hits = pipeline._search_here(catalog, collection, index, query, options, True)
    expected = _brute_force(query, items, projection, "binary" if mode == "binary" else "float", rule, 4)
    assert [h.item_id for h in hits] == [item_id for item_id, _ in expected]
    np.testing.assert_allclose([h.distance for h in hits], [d for _, d in expected], atol=1e-5)
    for hit in hits:  # occurrences: each listed segment's distance is its nearest query window's
        assert hit.segments and all(start < end for start, end, _ in hit.segments)


def test_the_mean_rule_prefers_an_item_that_matches_every_part_of_the_query(tmp_path):
    """A query of two windows (a then b). `partial` holds a exactly and nothing like b; `whole`
    holds something close to a and to b. The nearest pair is partial's; the mean favours whole."""
    a, b, c = np.eye(DIM, dtype=np.float32)[:3]
    close_a, close_b = _unit([a + 0.3 * b]), _unit([b + 0.3 * a])
    items = {"partial": np.stack([a, c]), "whole": np.concatenate([close_a, close_b])}
    projection = np.random.default_rng(0).standard_normal((DIM, BITS)).astype(np.float32)
    catalog, collection, index = _collection(tmp_path, items, projection)
    query = Query(floats=np.stack([a, b]), codes=_codes(np.stack([a, b]), projection))
    by_mean = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=2, mode="float"), True)
    by_min = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=2, mode="float", item_distance="min"), True)
    assert [h.item_id for h in by_mean] == ["whole", "partial"]
    assert [h.item_id for h in by_min] == ["partial", "whole"]
    # partial: window a at 0, window b at 1 (b is orthogonal to both of its segments): mean 0.5
    assert by_mean[1].distance == pytest.approx(0.5, abs=1e-6)
    assert by_min[0].distance == pytest.approx(0.0, abs=1e-6)
    # the occurrences stay per segment: partial's best segment is its first, at distance 0
    assert by_mean[1].segments[0][:2] == (0.0, 1.0) and by_mean[1].segments[0][2] == pytest.approx(0.0, abs=1e-6)


def test_max_distance_applies_to_the_mean(tmp_path):
    a, b, c = np.eye(DIM, dtype=np.float32)[:3]
    items = {"partial": np.stack([a, c]), "whole": np.concatenate([_unit([a + 0.3 * b]), _unit([b + 0.3 * a])])}
    projection = np.random.default_rng(0).standard_normal((DIM, BITS)).astype(np.float32)
    catalog, collection, index = _collection(tmp_path, items, projection)
    query = Query(floats=np.stack([a, b]), codes=_codes(np.stack([a, b]), projection))
    hits = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=5, mode="float", max_distance=0.2), True)
    assert [h.item_id for h in hits] == ["whole"]  # partial's mean is 0.5, though its nearest pair is 0


def test_one_window_queries_are_ranked_the_same_by_both_rules(random_items):
    catalog, collection, index, items, projection, rng = random_items
    floats = _unit(rng.standard_normal((1, DIM)))
    query = Query(floats=floats, codes=_codes(floats, projection))
    for mode in ("binary", "two_stage"):
        mean = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=5, mode=mode), True)
        nearest = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=5, mode=mode, item_distance="min"), True)
        assert [(h.item_id, h.distance, h.segments) for h in mean] == [(h.item_id, h.distance, h.segments) for h in nearest]


def test_the_pool_stops_after_the_window_budget(tmp_path, monkeypatch):
    """Long items: once the budget of windows is read, no further chunk of k items is re-scored,
    and the answer still has k items, nearest first."""
    rng = np.random.default_rng(5)
    projection = rng.standard_normal((DIM, BITS)).astype(np.float32)
    items = {f"long{i}": _unit(rng.standard_normal((12, DIM))) for i in range(12)}
    catalog, collection, index = _collection(tmp_path, items, projection)
    monkeypatch.setattr(pipeline, "MEAN_POOL_WINDOWS", 20)
    read: list[int] = []
    segments_of = catalog.segments_of_items
    monkeypatch.setattr(catalog, "segments_of_items", lambda *a: read.append(len(a[1])) or segments_of(*a))
    floats = _unit(rng.standard_normal((2, DIM)))
    hits = pipeline._search_here(catalog, collection, index, Query(floats=floats, codes=_codes(floats, projection)),
                                 SearchOptions(k=3, mode="float"), True)
    assert read == [3]  # 36 windows in the first chunk: over the budget of 20
    assert len(hits) == 3 and [h.distance for h in hits] == sorted(h.distance for h in hits)


def test_an_item_deleted_between_scan_and_rescoring_is_left_out(tmp_path, monkeypatch):
    a, b, c = np.eye(DIM, dtype=np.float32)[:3]
    items = {"partial": np.stack([a, c]), "whole": np.concatenate([_unit([a + 0.3 * b]), _unit([b + 0.3 * a])])}
    projection = np.random.default_rng(0).standard_normal((DIM, BITS)).astype(np.float32)
    catalog, collection, index = _collection(tmp_path, items, projection)
    segments_of = catalog.segments_of_items
    # the catalog no longer has "whole" when its windows are read (a concurrent delete)
    monkeypatch.setattr(catalog, "segments_of_items", lambda *a: {k: v for k, v in segments_of(*a).items() if k != "whole"})
    query = Query(floats=np.stack([a, b]), codes=_codes(np.stack([a, b]), projection))
    hits = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=2, mode="float"), True)
    assert [h.item_id for h in hits] == ["partial"]
