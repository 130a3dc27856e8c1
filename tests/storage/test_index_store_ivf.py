"""A collection whose codes get an IVF: built from the catalog's codes, kept in step with its writes,
snapshotted with the flat index and rebuilt when its snapshot cannot be trusted."""

from __future__ import annotations

import numpy as np

from app.index import IndexSpec
from app.index.adaptive import ivf_path
from app.index.exact import hamming_distances
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex
from bench.index.index_kinds import clustered_codes

BITS, DIM = 256, 8


def _setup(tmp_path, spec: IndexSpec):
    catalog = Catalog(tmp_path / "c.db")
    collection = Collection("c", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 0.0, index_spec=spec)
    catalog.create_collection(collection)
    return catalog, catalog.get_collection("c")


def _items(codes: np.ndarray, first: int, per_item: int = 100) -> list[NewItem]:
    floats = np.zeros((len(codes), DIM), np.float32)
    floats[:, 0] = 1.0
    return [NewItem(f"i{first + start}", None, None, None, {}, np.zeros((per_item, 2)), floats[start : start + per_item], codes[start : start + per_item])
            for start in range(0, len(codes), per_item)]


def test_ivf_collection_round_trip(tmp_path) -> None:
    codes, queries = clustered_codes(12_000, BITS, 20, seed=9)
    catalog, collection = _setup(tmp_path, IndexSpec("ivf", nlist=64, nprobe=64))
    assert collection.index_spec == IndexSpec("ivf", nlist=64, nprobe=64)  # stored and read back
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    for start in range(0, len(codes), 2000):
        index.apply(catalog.upsert_items("c", _items(codes[start : start + 2000], start)))
    assert index.binary.wait_for_build(120)
    assert index.describe_index()["answering"] == "ivf"
    # a new IVF makes a snapshot due, writes or not (a restart then loads it instead of training it)
    index.snapshot(catalog)
    index.binary.ivf = None
    index.maybe_build()
    assert index.binary.wait_for_build(120) and index.unsnapshotted == 1
    # a delete through the catalog: never returned, by any nprobe
    index.apply(catalog.delete_item("c", "i0"))
    gone = np.arange(1, 101)  # segment ids of i0 (the catalog numbers segments from 1)
    assert not np.isin(gone, catalog.all_segment_ids("c")).any()
    for nprobe in (1, 8, 64):
        _, got = index.binary.search(queries, 200, nprobe=nprobe)
        assert not np.isin(got, gone).any()
    # nprobe = nlist: exact, against brute force over what the catalog holds
    kept = codes[100:]
    d, _ = index.binary.search(queries, 10)
    assert np.array_equal(d, np.sort(hamming_distances(queries, kept), axis=1)[:, :10])

    index.snapshot(catalog)
    assert ivf_path(index.snapshot_paths()[0]).exists()
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    assert reopened.binary.ivf is not None and not reopened.binary.building  # loaded, not retrained
    assert len(reopened.binary.ivf) == len(kept)

    # a write after the snapshot, then a corrupt IVF file: reopening rebuilds the IVF from the catalog's codes
    index.apply(catalog.delete_item("c", "i100"))
    path = ivf_path(index.snapshot_paths()[0])
    path.write_bytes(path.read_bytes()[:-10])
    again = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    assert again.binary.wait_for_build(120) and again.binary.answering == "ivf"
    assert len(again.binary.ivf) == len(codes) - 200
    _, got = again.binary.search(queries, 300, nprobe=2)
    assert not np.isin(got, np.arange(1, 201)).any()

    index.delete_files()
    assert not path.exists()
