"""Snapshots: round trip, atomic replacement, and every way a file can be unusable."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from app.index import BinaryIndex, FloatIndex, SnapshotError
from app.index import exact
from tests.index.conftest import assert_knn_consistent, random_codes, unit_vectors


def _binary(rng: np.random.Generator, n: int = 500) -> BinaryIndex:
    index = BinaryIndex(256, shards=2)
    index.add(rng.permutation(10 * n)[:n], random_codes(rng, n, 256))
    index.remove(index.ids()[::7])  # holes and moved rows must survive the round trip too
    return index


def test_binary_round_trip_gives_identical_results(rng: np.random.Generator, tmp_path: Path) -> None:
    index = _binary(rng)
    path = tmp_path / "c.binary"
    index.save(path, last_seq=42)
    for shards in (2, 3):
        loaded, seq = BinaryIndex.load(path, shards=shards)
        assert seq == 42 and loaded.bits == 256 and loaded.shards == shards
        np.testing.assert_array_equal(loaded.ids(), index.ids())
        np.testing.assert_array_equal(loaded.reconstruct(index.ids()), index.reconstruct(index.ids()))
        queries = random_codes(rng, 10, 256)
        d0, _ = index.search(queries, 20)
        d1, i1 = loaded.search(queries, 20)
        np.testing.assert_array_equal(d0, d1)
        # Row layout differs after a reload, so tied ids may come in another order; each
        # returned id must still carry exactly its true distance.
        ids = index.ids()
        truth = exact.hamming_distances(queries, index.reconstruct(ids))
        assert_knn_consistent(d1, i1, truth, ids, 20, ascending=True)
    assert [p.name for p in tmp_path.iterdir()] == ["c.binary"]  # no temp files left behind


def test_float_round_trip(rng: np.random.Generator, tmp_path: Path) -> None:
    index = FloatIndex(64, shards=2)
    vectors = unit_vectors(rng, 300, 64)
    index.add(np.arange(300), vectors)
    index.save(tmp_path / "f", last_seq=7)
    loaded, seq = FloatIndex.load(tmp_path / "f")
    assert seq == 7 and loaded.dim == 64
    queries = unit_vectors(rng, 4, 64)
    for a, b in zip(index.search(queries, 10), loaded.search(queries, 10), strict=True):
        np.testing.assert_array_equal(a, b)


def test_empty_index_round_trip(tmp_path: Path) -> None:
    BinaryIndex(64).save(tmp_path / "e", last_seq=0)
    loaded, seq = BinaryIndex.load(tmp_path / "e")
    assert len(loaded) == 0 and seq == 0


def test_save_replaces_previous_snapshot(rng: np.random.Generator, tmp_path: Path) -> None:
    index = _binary(rng)
    path = tmp_path / "c"
    index.save(path, last_seq=1)
    index.remove(index.ids()[:10])
    index.save(path, last_seq=2)
    loaded, seq = BinaryIndex.load(path)
    assert seq == 2 and len(loaded) == len(index)


def test_missing_snapshot_raises(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match="no snapshot"):
        BinaryIndex.load(tmp_path / "absent")


@pytest.mark.parametrize("keep", [0, 10, 40, -1])
def test_truncated_snapshot_raises(rng: np.random.Generator, tmp_path: Path, keep: int) -> None:
    path = tmp_path / "c"
    _binary(rng).save(path, last_seq=3)
    data = path.read_bytes()
    path.write_bytes(data[:keep] if keep >= 0 else data[:-1])
    with pytest.raises(SnapshotError):
        BinaryIndex.load(path)


@pytest.mark.parametrize("where", ["magic", "count", "ids", "codes", "digest"])
def test_corrupt_snapshot_raises(rng: np.random.Generator, tmp_path: Path, where: str) -> None:
    path = tmp_path / "c"
    _binary(rng).save(path, last_seq=3)
    data = bytearray(path.read_bytes())
    offset = {"magic": 0, "count": 28, "ids": 40, "codes": len(data) - 100, "digest": len(data) - 1}[where]
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError):
        BinaryIndex.load(path)


def test_wrong_kind_raises(rng: np.random.Generator, tmp_path: Path) -> None:
    _binary(rng).save(tmp_path / "c", last_seq=1)
    with pytest.raises(SnapshotError, match="kind"):
        FloatIndex.load(tmp_path / "c")


def test_failed_save_leaves_old_snapshot(rng: np.random.Generator, tmp_path: Path) -> None:
    index = _binary(rng)
    path = tmp_path / "c"
    index.save(path, last_seq=5)
    with pytest.raises(OSError):
        index.save(tmp_path / "no-such-dir" / "c", last_seq=6)
    assert BinaryIndex.load(path)[1] == 5
    assert sorted(os.listdir(tmp_path)) == ["c"]
