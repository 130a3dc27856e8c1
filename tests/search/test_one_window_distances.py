"""The two-stage tail of a one-window query in numpy (issue 35) against the Python loops it replaced:
the same segment -> distance dict, in the same order, and the same shortlist vectors, ties and
non-finite distances included; and whole searches that take it answer as a brute-force ranking."""

import numpy as np
import pytest

from app.search import pipeline
from app.search.pipeline import Query, SearchOptions
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex


def loops(candidates, exact, rows, vectors_read, map_top, vectors):
    """What _segment_distances did for every query before: _merge, the map_top cut, the vectors by row."""
    best: dict[int, float] = {}
    pipeline._merge(best, candidates, exact)
    if map_top is not None and len(best) > map_top:
        values = np.fromiter(best.values(), np.float64, len(best))
        cutoff = np.partition(values, map_top - 1)[map_top - 1]
        best = {sid: d for sid, d in best.items() if d <= cutoff}
    if vectors is not None:
        row_of = dict(zip(candidates.tolist(), rows.tolist()))
        vectors.update((sid, vectors_read[row_of[sid]]) for sid in best)
    return best


def shortlist(rng, n, depth, ties, dim=4):
    """A re-ranked shortlist as _segment_distances has it: distinct sorted ids, their distances, and the
    argpartition rows kept (or every row when the shortlist is no longer than the depth)."""
    ids = np.sort(rng.choice(10 * n, n, replace=False)).astype(np.int64)
    vectors_read = rng.standard_normal((n, dim)).astype(np.float32)
    exact = rng.integers(0, ties, n).astype(np.float32) / ties if ties else rng.random(n).astype(np.float32)
    rows = np.arange(n)
    if n > depth:
        rows = np.argpartition(exact, depth - 1)[:depth]
    return ids[rows], exact[rows], rows, vectors_read


@pytest.mark.parametrize("ties", [0, 3, 50])
@pytest.mark.parametrize(("n", "depth", "map_top"), [(4000, 400, 100), (400, 400, 100), (50, 400, 100), (300, 40, None), (7, 4, 4)])
def test_the_numpy_tail_builds_the_loops_dict_in_their_order(ties, n, depth, map_top):
    rng = np.random.default_rng(n + depth + ties)
    for _ in range(5):
        candidates, exact, rows, vectors_read = shortlist(rng, n, depth, ties)
        want_vectors: dict[int, np.ndarray] = {}
        got_vectors: dict[int, np.ndarray] = {}
        want = loops(candidates, exact, rows, vectors_read, map_top, want_vectors)
        got = pipeline._one_window_distances(candidates, exact, rows, vectors_read, map_top, got_vectors)
        assert list(got.items()) == list(want.items())  # same keys, values and insertion order
        assert all(type(d) is float for d in got.values())
        assert list(got_vectors) == list(want_vectors)
        for sid, vector in want_vectors.items():
            assert np.array_equal(got_vectors[sid], vector)
        assert pipeline._one_window_distances(candidates, exact, rows, vectors_read, map_top, None) == want


def test_non_finite_distances_are_dropped_as_the_merge_dropped_them():
    candidates = np.arange(6, dtype=np.int64)
    exact = np.array([0.3, np.nan, 0.1, np.inf, 0.2, 0.1], dtype=np.float32)
    rows = np.arange(6)
    vectors_read = np.eye(6, dtype=np.float32)
    for map_top in (None, 2, 10):
        want_vectors: dict[int, np.ndarray] = {}
        got_vectors: dict[int, np.ndarray] = {}
        want = loops(candidates, exact, rows, vectors_read, map_top, want_vectors)
        got = pipeline._one_window_distances(candidates, exact, rows, vectors_read, map_top, got_vectors)
        assert list(got.items()) == list(want.items())
        assert list(got_vectors) == list(want_vectors) and 1 not in got and 3 not in got


@pytest.mark.parametrize("modality", ["image", "audio"])
def test_one_window_two_stage_search_matches_brute_force_after_deletes(tmp_path, modality):
    """End to end: a one-window two-stage search over every row (oversample covers the collection) is the
    exact cosine ranking, with rows deleted from the index after it was built still never returned."""
    dim, bits, n = 8, 16, 200
    catalog = Catalog(tmp_path / "c.db")
    collection = Collection("c", modality, "test", ("binary", "float"), dim, bits, 1.0 if modality == "audio" else None,
                            0.5 if modality == "audio" else None, False, "", 0.0)
    catalog.create_collection(collection)
    rng = np.random.default_rng(11)
    floats = rng.standard_normal((n, dim)).astype(np.float32)
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    codes = rng.integers(0, 256, (n, bits // 8), dtype=np.uint8)
    ids = [f"x{i:03d}" for i in range(n)]
    catalog.upsert_items("c", [NewItem(ids[i], None, None, None, {}, np.array([[0.0, 1.0]]), floats[i:i + 1], codes[i:i + 1])
                               for i in range(n)])
    index = CollectionIndex.open(collection, catalog, tmp_path, shards=2)
    gone = set(range(0, n, 7))
    index.float.remove(np.asarray([catalog.item_segments("c", ids[i], dim, bits)[0][0] for i in gone], np.int64))
    query = Query(floats=floats[3:4].copy(), codes=codes[3:4].copy())
    hits = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=15, mode="two_stage", oversample=n), True)
    distance = 1.0 - floats @ floats[3]
    expected = sorted((float(distance[i]), ids[i]) for i in range(n) if i not in gone)[:15]
    assert [h.item_id for h in hits] == [item for _, item in expected]
    np.testing.assert_allclose([h.distance for h in hits], [d for d, _ in expected], atol=1e-6)
    if modality == "image":  # re-ranking reads each hit's stored vector from the search
        assert all(np.array_equal(h.vector, floats[ids.index(h.item_id)]) for h in hits)
