import numpy as np
import pytest

from app.errors import Conflict, NotFound
from app.storage.catalog import Collection, NewItem


def _collection(name="c"):
    return Collection(name, "audio", "audio-baseline", ("binary", "float"), 4, 8, 1.0, 0.5, True, "", 0.0)


def _item(item_id, n=2, seed=0):
    rng = np.random.default_rng(seed)
    floats = rng.standard_normal((n, 4)).astype(np.float32)
    return NewItem(item_id, f"{item_id}.wav", "wav", None, {"k": item_id}, np.array([[i * 0.5, i * 0.5 + 1] for i in range(n)]),
                   floats, rng.integers(0, 256, (n, 1), dtype=np.uint8))


def test_upsert_and_delete_sequence_and_tombstones(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    with pytest.raises(Conflict):
        catalog.create_collection(_collection())
    first = catalog.upsert_items("c", [_item("a"), _item("b", n=3)])
    assert list(first.added_segment_ids) == [1, 2, 3, 4, 5] and first.removed_segment_ids == []
    second = catalog.upsert_items("c", [_item("a", n=1, seed=5)])
    assert second.seq > first.seq and second.removed_segment_ids == [1, 2] and list(second.added_segment_ids) == [6]
    assert catalog.counts("c") == (2, 4)
    assert list(catalog.tombstones_after("c", first.seq)) == [1, 2]
    ids, times, floats, codes = catalog.item_segments("c", "b", 4, 8)
    assert list(ids) == [3, 4, 5] and times[1].tolist() == [0.5, 1.5] and floats.shape == (3, 4) and codes.shape == (3, 1)
    deleted = catalog.delete_item("c", "b")
    assert sorted(deleted.removed_segment_ids) == [3, 4, 5]
    with pytest.raises(NotFound):
        catalog.delete_item("c", "b")
    replay = [ids for ids, _, _ in catalog.iter_segments("c", 4, 8, after_seq=first.seq)]
    assert [list(i) for i in replay] == [[6]]
    catalog.prune_tombstones("c", deleted.seq)
    assert len(catalog.tombstones_after("c", 0)) == 0


def test_segment_ids_are_never_reused(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item("a")])
    catalog.delete_item("c", "a")
    again = catalog.upsert_items("c", [_item("a")])
    assert list(again.added_segment_ids) == [3, 4]


def test_a_failed_transaction_changes_nothing(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item("a")])
    bad = _item("b")
    bad.metadata = {"x": object()}  # not JSON: fails inside the transaction, after 'a' was re-deleted
    with pytest.raises(TypeError):
        catalog.upsert_items("c", [_item("a", seed=9), bad])
    assert catalog.counts("c") == (1, 2)
    assert list(catalog.item_segments("c", "a", 4, 8)[0]) == [1, 2]


def test_catalog_survives_reopening(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item("a")])
    catalog.close()
    reopened = open_catalog()
    assert reopened.counts("c") == (1, 2) and reopened.get_collection("c").window_s == 1.0


def test_segments_of_items_is_item_segments_for_each_item_in_one_call(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.create_collection(_collection("other"))
    catalog.upsert_items("c", [_item("a", n=3, seed=1), _item("b", n=1, seed=2), _item("z", n=2, seed=3)])
    catalog.upsert_items("other", [_item("a", n=2, seed=4)])  # same item id in another collection: not mixed in
    got = catalog.segments_of_items("c", ["z", "a", "missing", "a"], 4, 8)
    assert set(got) == {"a", "z"}  # unknown ids are absent, repeated ones read once
    for item_id in ("a", "z"):
        for batched, single in zip(got[item_id], catalog.item_segments("c", item_id, 4, 8)):
            np.testing.assert_array_equal(batched, single)
    assert catalog.segments_of_items("c", [], 4, 8) == {}
