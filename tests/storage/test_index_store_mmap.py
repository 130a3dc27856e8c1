"""A collection with ``floats: "mmap"``: its float vectors live in mapped files, and it keeps every
guarantee of the in-memory floats: the catalog is the truth, snapshots are loaded and replayed,
a lost or corrupt snapshot is rebuilt, a SIGKILL loses nothing committed, no deleted id comes back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.index import FloatIndex, IndexSpec, MappedFloatIndex
from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex

BITS, DIM, PER_ITEM = 64, 16, 10


def _setup(tmp_path: Path, floats: str = "mmap") -> tuple[Catalog, Collection]:
    catalog = Catalog(tmp_path / "c.db")
    collection = Collection("c", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 0.0,
                            index_spec=IndexSpec("flat", floats=floats))
    catalog.create_collection(collection)
    return catalog, catalog.get_collection("c")


def _items(names: list[str], seed: int) -> list[NewItem]:
    rng = np.random.default_rng(seed)
    out = []
    for name in names:
        floats = rng.standard_normal((PER_ITEM, DIM)).astype(np.float32)
        floats /= np.linalg.norm(floats, axis=1, keepdims=True)
        codes = np.packbits(floats @ rng.standard_normal((DIM, BITS)).astype(np.float32) > 0, axis=1, bitorder="little")
        out.append(NewItem(name, None, None, None, {}, np.zeros((PER_ITEM, 2)), floats, codes))
    return out


def _check_against_catalog(index: CollectionIndex, catalog: Catalog) -> None:
    """Ids equal the catalog's, and re-rank scores are the catalog's vectors' exact cosines."""
    assert isinstance(index.float, MappedFloatIndex)
    ids = np.sort(catalog.all_segment_ids("c"))
    np.testing.assert_array_equal(index.float.ids(), ids)
    np.testing.assert_array_equal(index.binary.ids(), ids)
    stored = {}
    for seg_ids, floats, _ in catalog.iter_segments("c", DIM, BITS):
        stored.update(zip(seg_ids.tolist(), floats))
    query = np.asarray(stored[int(ids[0])], np.float32)
    present, vectors = index.float.reconstruct_present(ids)
    truth = np.stack([stored[int(i)] for i in present]).astype(np.float64) @ query.astype(np.float64)
    np.testing.assert_allclose(vectors @ query, truth, atol=1e-6)


def test_mmap_collection_is_a_cache_of_the_catalog(tmp_path: Path) -> None:
    catalog, collection = _setup(tmp_path)
    assert collection.index_spec.floats == "mmap"  # stored and read back
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    assert isinstance(index.float, MappedFloatIndex) and index.describe_index()["floats"] == "mmap"
    index.apply(catalog.upsert_items("c", _items([f"i{n}" for n in range(30)], seed=1)))
    index.apply(catalog.delete_item("c", "i3"))
    index.apply(catalog.upsert_items("c", _items(["i4", "i31"], seed=2)))  # an upsert: i4's segments replaced
    _check_against_catalog(index, catalog)
    assert index.describe_index()["float_file_bytes"] >= 31 * PER_ITEM * DIM * 4
    assert [p.name for p in (tmp_path / "ix").iterdir()] == []  # mapped files are unlinked; no snapshot yet

    index.snapshot(catalog)
    # writes after the snapshot: a reopen loads the snapshot into mapped files and replays them
    index.apply(catalog.delete_item("c", "i5"))
    index.apply(catalog.upsert_items("c", _items(["i6", "i40"], seed=3)))
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=3)
    _check_against_catalog(reopened, catalog)
    gone = np.setdiff1d(index.float.ids(), catalog.all_segment_ids("c"))
    _, got = reopened.float.search(reopened.float.reconstruct(reopened.float.ids()[:5]), 50)
    assert not np.isin(got, gone).any()

    # a corrupt snapshot: rebuilt from the catalog into mapped files
    path = reopened.snapshot_paths()[1]
    reopened.snapshot(catalog)
    path.write_bytes(path.read_bytes()[:-7])
    rebuilt = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    _check_against_catalog(rebuilt, catalog)
    rebuilt.delete_files()
    assert not path.exists() and len(rebuilt.float) == 0  # closed: its files' space is freed now


def test_snapshot_files_move_between_memory_and_mmap(tmp_path: Path) -> None:
    catalog, collection = _setup(tmp_path, floats="memory")
    index = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    index.apply(catalog.upsert_items("c", _items([f"i{n}" for n in range(10)], seed=4)))
    index.snapshot(catalog)
    assert type(index.float) is FloatIndex
    as_mmap = Collection(**{**collection.__dict__, "index_spec": IndexSpec("flat", floats="mmap")})
    mapped = CollectionIndex.open(as_mmap, catalog, tmp_path / "ix", shards=2)
    assert mapped.unsnapshotted == 0  # loaded, not rebuilt
    _check_against_catalog(mapped, catalog)


_CHILD = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {root!r})
    from pathlib import Path
    from app.storage.catalog import Catalog
    from app.storage.index_store import CollectionIndex
    from tests.storage.test_index_store_mmap import _items
    tmp = Path({tmp!r})
    catalog = Catalog(tmp / "c.db")
    index = CollectionIndex.open(catalog.get_collection("c"), catalog, tmp / "ix", shards=2)
    index.apply(catalog.upsert_items("c", _items([f"a{{n}}" for n in range(40)], seed=5)))
    index.snapshot(catalog)
    index.apply(catalog.delete_item("c", "a1"))
    index.apply(catalog.upsert_items("c", _items(["a2", "b0", "b1"], seed=6)))
    print("committed", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # no shutdown snapshot, mapped files never flushed
""")


def test_sigkill_after_committed_writes_loses_nothing(tmp_path: Path) -> None:
    catalog, collection = _setup(tmp_path)
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.run([sys.executable, "-c", _CHILD.format(root=root, tmp=str(tmp_path))],
                           capture_output=True, text=True, timeout=120, cwd=root)
    assert child.returncode == -signal.SIGKILL and "committed" in child.stdout, child.stderr
    reopened = CollectionIndex.open(collection, catalog, tmp_path / "ix", shards=2)
    _check_against_catalog(reopened, catalog)
    assert reopened.unsnapshotted == 1  # replayed: a snapshot is due
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == ["c.binary.faiss", "c.float.faiss"]  # no stale files


def test_built_from_a_shared_catalog_the_floats_are_mapped_in_the_temp_folder(tmp_path: Path, monkeypatch) -> None:
    # cluster shard actors and shared-catalog processes build from the catalog with no directory of their own
    catalog, collection = _setup(tmp_path)
    catalog.upsert_items("c", _items([f"i{n}" for n in range(12)], seed=8))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    built = CollectionIndex.build(collection, catalog, shards=2, partition=(0, 1))
    assert isinstance(built.float, MappedFloatIndex) and built.float.directory == tmp_path / "tmp"
    _check_against_catalog(built, catalog)
    assert list((tmp_path / "tmp").iterdir()) == []  # unlinked there too
