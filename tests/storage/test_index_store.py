import numpy as np

from app.encoders.base import l2_normalise, sign_codes
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex

DIM, BITS = 16, 16


def _setup(tmp_path):
    catalog = Catalog(tmp_path / "c.db")
    collection = Collection("c", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 0.0)
    catalog.create_collection(collection)
    return catalog, collection


def _item(item_id, n, seed):
    raw = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return NewItem(item_id, None, None, None, {}, np.zeros((n, 2)), l2_normalise(raw), sign_codes(raw))


def _write(catalog, index, items):
    index.apply(catalog.upsert_items("c", items))


def _consistent(catalog, index):
    expected = np.sort(catalog.all_segment_ids("c"))
    return all(np.array_equal(ix.ids(), expected) for _, ix in index.indices())


def test_snapshot_then_replay_newer_rows(tmp_path):
    catalog, collection = _setup(tmp_path)
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    _write(catalog, index, [_item("a", 3, 0), _item("b", 2, 1)])
    index.snapshot(catalog)
    # changes after the snapshot: an upsert, a delete and a new item, never applied to a loaded index
    catalog.upsert_items("c", [_item("a", 1, 2)])
    catalog.delete_item("c", "b")
    catalog.upsert_items("c", [_item("d", 4, 3)])
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    assert _consistent(catalog, reopened) and len(reopened) == 5
    query = _item("q", 1, 3)  # same seed as "d": its first segment is an exact match
    sims, ids = reopened.float.search(query.floats, 1)
    d_ids, *_ = catalog.item_segments("c", "d", DIM, BITS)
    assert ids[0, 0] == d_ids[0] and abs(sims[0, 0] - 1) < 1e-5


def test_missing_or_corrupt_snapshot_is_rebuilt_from_the_catalog(tmp_path):
    catalog, collection = _setup(tmp_path)
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    _write(catalog, index, [_item("a", 3, 0), _item("b", 2, 1)])
    index.snapshot(catalog)
    binary_path, float_path = index.snapshot_paths()
    binary_path.write_bytes(binary_path.read_bytes()[:-7])  # truncated
    float_path.unlink()
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    assert _consistent(catalog, reopened) and len(reopened) == 5


def test_snapshot_newer_than_catalog_is_corrected(tmp_path):
    """A snapshot holding ids the catalog lacks (e.g. a restored older catalog) is rebuilt."""
    catalog, collection = _setup(tmp_path)
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=1)
    _write(catalog, index, [_item("a", 2, 0)])
    index.float.add(np.array([999], np.int64), _item("z", 1, 9).floats)  # stray id
    index.snapshot(catalog)
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=1)
    assert _consistent(catalog, reopened) and 999 not in reopened.float.ids()
