import numpy as np

from app.encoders.base import pack_bits
from app.search.ranking import cosine_distance, group_by_item, hamming, non_maximum_suppression, temporal_iou


def test_hamming_matches_a_bit_count():
    rng = np.random.default_rng(3)
    bits_q, bits_d = rng.integers(0, 2, (3, 64)), rng.integers(0, 2, (5, 64))
    expected = (bits_q[:, None, :] != bits_d[None, :, :]).sum(axis=2)
    assert np.array_equal(hamming(pack_bits(bits_q), pack_bits(bits_d)), expected)


def test_cosine_distance_of_unit_vectors():
    q = np.array([[1.0, 0.0]], np.float32)
    d = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]], np.float32)
    assert np.allclose(cosine_distance(q, d), [[0.0, 1.0, 2.0]])


def test_item_cost_is_the_minimum_over_its_segments():
    # segments 1,2 belong to "a" (0.5, 0.2), segment 3 to "b" (0.3), segment 9 was deleted
    distances = {1: 0.5, 2: 0.2, 3: 0.3, 9: 0.0}
    items = {1: ("a", 0.0, 1.0), 2: ("a", 1.0, 2.0), 3: ("b", 0.0, 1.0)}
    hits = group_by_item(distances, items)
    assert [(h.item_id, h.distance, h.best_segment_id) for h in hits] == [("a", 0.2, 2), ("b", 0.3, 3)]


def test_ties_are_broken_by_id():
    hits = group_by_item({1: 0.1, 2: 0.1}, {1: ("z", 0, 1), 2: ("m", 0, 1)})
    assert [h.item_id for h in hits] == ["m", "z"]


def test_temporal_iou_by_hand():
    assert temporal_iou((0, 1), (0.5, 1.5)) == 0.5 / 1.5
    assert temporal_iou((0, 1), (1, 2)) == 0.0
    assert temporal_iou((0, 2), (0.5, 1.5)) == 0.5


def test_non_maximum_suppression_keeps_separate_places():
    # windows of 1 s every 0.5 s; good matches around 2 s and 7 s
    segments = [(2.0, 3.0, 0.1), (1.5, 2.5, 0.2), (2.5, 3.5, 0.25), (7.0, 8.0, 0.15), (6.5, 7.5, 0.3), (4.0, 5.0, 0.9)]
    kept = non_maximum_suppression(segments, iou=0.3, limit=3)
    assert kept == [(2.0, 3.0, 0.1), (7.0, 8.0, 0.15), (4.0, 5.0, 0.9)]
    assert non_maximum_suppression(segments, iou=0.3, limit=2) == kept[:2]


def test_cosine_distance_never_rounds_below_zero() -> None:
    """float32 rounding puts some unit vectors' self-similarity a hair above 1 (users saw -3e-7)."""
    from app.index import cosine_distance as index_cosine_distance

    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 256)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    raw_self = np.diag(x @ x.T)
    assert (raw_self > 1.0).any()  # the case exists in this sample
    distances = cosine_distance(x, x)
    assert (distances >= 0).all() and (np.diag(distances)[raw_self > 1.0] == 0).all()
    assert (index_cosine_distance(raw_self) >= 0).all()
    assert (cosine_distance(x[:50], -x[:50]) <= 2).all()
