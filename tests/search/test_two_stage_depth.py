"""How deep a two-stage search's shortlist goes (app/search/depth.py): an image collection of at most SHALLOW_IMAGES
images, without a filter or distance limit, scans 1 segment per wanted item (k x oversample codes), everything
else 4, and what a shortlist of that depth answers is checked against a brute-force ranking of the same codes and floats."""

import numpy as np
import pytest

from app.search import pipeline
from app.search.pipeline import Query, SearchOptions
from app.search.ranking import hamming
from tests.search.tiny_images import image_collection

DIM, N = 32, 600


@pytest.fixture
def images(tmp_path):
    rng = np.random.default_rng(11)
    floats = rng.standard_normal((N, DIM)).astype(np.float32)
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    codes = np.packbits(floats > 0, axis=1, bitorder="little")  # sign codes, as the encoders make them
    ids = [f"i{(i * 7919) % N:03d}" for i in range(N)]
    catalog, collection, index = image_collection(tmp_path, floats, codes, ids, metadata=lambda i: {"n": i % 2})
    return catalog, collection, index, floats, codes, ids


def shortlist_sizes(index, monkeypatch):
    """Spy on the binary index: the k of every scan a search asks for."""
    asked = []
    real = index.binary.search

    def spy(codes, k, **kw):
        asked.append(k)
        return real(codes, k, **kw)

    monkeypatch.setattr(index.binary, "search", spy)
    return asked


@pytest.mark.parametrize("k, oversample, expected", [(100, 10, 600), (40, 5, 200), (10, 4, 128)])
def test_an_image_two_stage_search_shortlists_k_times_oversample(images, monkeypatch, k, oversample, expected):
    catalog, collection, index, floats, codes, _ = images
    asked = shortlist_sizes(index, monkeypatch)
    query = Query(floats=floats[3:4].copy(), codes=codes[3:4].copy())
    hits = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=k, mode="two_stage", oversample=oversample), False)
    assert len(hits) == k
    # one segment per item: max(k, 32) x oversample codes (capped at the collection), not 4x that
    assert asked == [min(N, expected)]


def test_a_filter_an_explicit_depth_and_binary_mode_keep_four_segments_per_item(images, monkeypatch):
    catalog, collection, index, floats, codes, _ = images
    asked = shortlist_sizes(index, monkeypatch)
    query = Query(floats=floats[3:4].copy(), codes=codes[3:4].copy())
    for options in (SearchOptions(k=10, mode="two_stage", oversample=3, filter={"n": 1}),
                    SearchOptions(k=10, mode="two_stage", oversample=3, max_distance=2.0),
                    SearchOptions(k=10, mode="two_stage", oversample=3, depth_per_item=4),
                    SearchOptions(k=10, mode="binary")):
        pipeline._search_here(catalog, collection, index, query, options, False)
    assert asked == [120, 120, 120, 40]


def test_a_collection_of_more_than_shallow_images_keeps_four_segments_per_item(images, monkeypatch):
    """Among 10^5 images the shorter shortlist missed issue 35's rule, so a large collection keeps 4."""
    from app.search import depth

    catalog, collection, index, floats, codes, _ = images
    asked = shortlist_sizes(index, monkeypatch)
    query = Query(floats=floats[3:4].copy(), codes=codes[3:4].copy())
    options = SearchOptions(k=10, mode="two_stage", oversample=3)
    pipeline._search_here(catalog, collection, index, query, options, False)
    monkeypatch.setattr(depth, "SHALLOW_IMAGES", N - 1)
    pipeline._search_here(catalog, collection, index, query, options, False)
    assert asked == [96, 120]
    assert depth.SHALLOW_IMAGES < N and depth.per_item(collection, options, N) == 4


@pytest.mark.parametrize("depth_per_item", [None, 4])
@pytest.mark.parametrize("row", [0, 17, 301])
def test_the_answer_is_the_exact_ranking_of_the_hamming_shortlist(images, depth_per_item, row):
    """Brute force: the k best cosines among the images the shortlist must hold (Hamming distance below the
    shortlist's last), and nothing from beyond it (distance above it); images at that distance may go either way."""
    catalog, collection, index, floats, codes, ids = images
    k, oversample = 20, 3
    size = max(k * (depth_per_item or 1), 32) * oversample  # app/search/depth.py's first depth x oversample
    options = SearchOptions(k=k, mode="two_stage", oversample=oversample, depth_per_item=depth_per_item)
    query = Query(floats=floats[row:row + 1] + 0.01, codes=codes[row:row + 1].copy())
    hits = pipeline._search_here(catalog, collection, index, query, options, False)

    bits = hamming(query.codes, codes)[0]
    last = np.sort(bits)[size - 1]  # the shortlist's farthest Hamming distance
    cosine = 1.0 - (floats @ query.floats[0]).astype(np.float64)
    row_of = {item: i for i, item in enumerate(ids)}
    got = [row_of[h.item_id] for h in hits]
    assert len(got) == k and all(bits[r] <= last for r in got)
    np.testing.assert_allclose([h.distance for h in hits], cosine[got], atol=1e-5)
    assert [h.distance for h in hits] == sorted(h.distance for h in hits)
    surely_in = [r for r in range(N) if bits[r] < last]
    better = [r for r in surely_in if cosine[r] < hits[-1].distance - 1e-6]
    assert set(better) <= set(got)  # no image the shortlist certainly held and the cosine prefers is missing


def test_a_shallower_shortlist_answers_as_the_deeper_one_where_the_exact_top_k_is_within_it(images):
    catalog, collection, index, floats, codes, _ = images
    query = Query(floats=floats[5:6].copy(), codes=codes[5:6].copy())
    deep = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=10, mode="two_stage", oversample=6,
                                                                                 depth_per_item=4), False)
    shallow = pipeline._search_here(catalog, collection, index, query, SearchOptions(k=10, mode="two_stage", oversample=6), False)
    # the query is image 5 itself: its own code and its nearest cosines sit at the head of any shortlist
    assert shallow[0].distance == pytest.approx(0.0, abs=1e-6) and deep[0].item_id == shallow[0].item_id
    # every shallow hit is a true cosine answer no worse than the deep search's k-th
    assert shallow[-1].distance >= deep[-1].distance - 1e-9
