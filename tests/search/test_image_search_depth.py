"""Image collections map only a search's k nearest segments to items (an image is one segment);
the answers must be exactly those of a brute-force ranking by (distance, item id), ties included."""

import numpy as np
import pytest

from app.search import pipeline
from app.search.pipeline import Query, SearchOptions
from app.search.ranking import hamming
from tests.search.tiny_images import image_collection, unit_floats_and_codes

DIM, BITS, N = 8, 16, 300


@pytest.fixture
def images(tmp_path):
    floats, codes = unit_floats_and_codes(np.random.default_rng(7), N, DIM, BITS)
    codes[::3] = codes[0]  # many exact Hamming ties, so the cut-off must keep every tied image
    # item ids in an order unrelated to insertion, so ties broken by id differ from ties broken by row
    ids = [f"i{(i * 7919) % N:03d}" for i in range(N)]
    catalog, collection, index = image_collection(tmp_path, floats, codes, ids, metadata=lambda i: {"n": i % 2})
    return catalog, collection, index, floats, codes, ids


def brute_force(distances: np.ndarray, ids: list[str], k: int, exclude: str | None = None) -> list[tuple[str, float]]:
    ranked = sorted((float(d), item) for d, item in zip(distances, ids) if item != exclude)
    return [(item, d) for d, item in ranked[:k]]


@pytest.mark.parametrize("k", [1, 10, 37])
def test_binary_search_of_images_keeps_every_tie_at_the_cut(images, monkeypatch, k):
    catalog, collection, index, _, codes, ids = images
    query = Query(floats=np.zeros((1, DIM), np.float32), codes=codes[:1].copy())
    options = SearchOptions(k=k, mode="binary")
    cut = pipeline._search_here(catalog, collection, index, query, options, True)
    monkeypatch.setattr(pipeline, "_map_top", lambda collection, query, options, depth: depth)
    whole = pipeline._search_here(catalog, collection, index, query, options, True)
    # the same items as mapping the whole scan depth: among the 100 images tied at distance 0 the
    # cut keeps every tied one the scan returned, so the smallest ids still win
    assert [(h.item_id, h.distance) for h in cut] == [(h.item_id, h.distance) for h in whole]
    assert [h.item_id for h in cut] == sorted(h.item_id for h in cut)  # all tied at 0: by id
    expected = brute_force(hamming(codes[:1], codes)[0], ids, k)
    assert [h.distance for h in cut] == [d for _, d in expected]


@pytest.mark.parametrize("mode", ["float", "two_stage"])
def test_float_and_two_stage_image_search_match_the_search_without_the_cut(images, monkeypatch, mode):
    catalog, collection, index, floats, codes, ids = images
    query = Query(floats=floats[5:6].copy(), codes=codes[5:6].copy(), exclude_item=ids[5])
    options = SearchOptions(k=20, mode=mode, oversample=4)
    cut = pipeline._search_here(catalog, collection, index, query, options, True)
    monkeypatch.setattr(pipeline, "_map_top", lambda collection, query, options, depth: depth)
    whole = pipeline._search_here(catalog, collection, index, query, options, True)
    assert [(h.item_id, h.distance) for h in cut] == [(h.item_id, h.distance) for h in whole]
    assert len(cut) == 20 and ids[5] not in {h.item_id for h in cut}
    if mode == "float":  # float search is exact: the brute-force cosine ranking
        expected = brute_force(1.0 - floats @ floats[5], ids, 20, exclude=ids[5])
        assert [h.item_id for h in cut] == [item for item, _ in expected]
        np.testing.assert_allclose([h.distance for h in cut], [d for _, d in expected], atol=1e-6)


def test_a_filter_keeps_the_whole_depth_so_deeper_rounds_find_the_matches(images):
    catalog, collection, index, _, codes, ids = images
    query = Query(floats=np.zeros((1, DIM), np.float32), codes=codes[1:2].copy())
    options = SearchOptions(k=15, mode="binary", filter={"n": 1})
    hits = pipeline._search_here(catalog, collection, index, query, options, True)
    odd = [i for i in range(N) if i % 2 == 1]
    expected = brute_force(hamming(codes[1:2], codes[odd])[0], [ids[i] for i in odd], 15)
    assert [(h.item_id, h.distance) for h in hits] == expected


@pytest.mark.parametrize("inline", [True, False])
def test_a_two_stage_image_hit_carries_its_stored_vector_and_only_then(images, monkeypatch, inline):
    """Re-ranking reads each hit's float vector from the search (issue 35: no second gather); it must be the
    stored vector of the hit's image, bit for bit, on the inline path and through the shared scan."""
    import asyncio

    from app.search.pipeline import Scans
    from app.search.scan import SharedScan

    catalog, collection, index, floats, codes, ids = images
    row_of = {item: i for i, item in enumerate(ids)}
    query = Query(floats=floats[9:10].copy(), codes=codes[9:10].copy(), text="a query")
    options = SearchOptions(k=40, mode="two_stage", oversample=3)
    if not inline:
        monkeypatch.setattr(pipeline, "INLINE_SCAN_BYTES", -1)  # through the shared scan
    scans = Scans(SharedScan(index.binary, "b"), SharedScan(index.float, "f"))

    async def run(opts):
        try:
            return await pipeline.search(catalog, collection, index, scans, query, opts)
        finally:
            await scans.binary.stop()
            await scans.float.stop()

    hits = asyncio.run(run(options))
    assert len(hits) == 40
    for hit in hits:
        assert hit.vector is not None and np.array_equal(hit.vector, floats[row_of[hit.item_id]])
    # the float index holds the same vectors the re-rank used to gather (app/usecases/query.py _item_vectors)
    present, gathered = index.float.reconstruct_present(np.asarray([h.best_segment_id for h in hits], np.int64))
    assert np.array_equal(np.stack([h.vector for h in hits]), gathered)
    # other modes read no vectors, so their hits carry none (re-ranking gathers them as before)
    scans = Scans(SharedScan(index.binary, "b"), SharedScan(index.float, "f"))
    assert all(h.vector is None for h in asyncio.run(run(SearchOptions(k=40, mode="float"))))
