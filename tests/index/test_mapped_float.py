"""MappedFloatIndex: float rows in memory-mapped files give exactly the in-memory index's answers,
honour deletes and upserts, survive snapshots, and fail cleanly on a full disk."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import numpy as np
import pytest

from app.index import FloatIndex, MappedFloatIndex, SnapshotError, cosine_distance
from app.index import _mapped_shard, exact, mapped_float
from tests.index.conftest import assert_knn_consistent, unit_vectors

DIM = 64


def _pair(tmp_path: Path, shards: int = 2) -> tuple[MappedFloatIndex, FloatIndex]:
    mapped = MappedFloatIndex(DIM, shards=shards, directory=tmp_path / "rows")
    heap = FloatIndex(DIM, shards=shards)
    mapped.parallel_min_rows = heap.parallel_min_rows = 0  # exercise the threaded scan on small data
    return mapped, heap


def _rerank(index: FloatIndex, query: np.ndarray, shortlist: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pipeline's two-stage re-rank (app/search/pipeline.py: _segment_distances) for one query."""
    present, vectors = index.reconstruct_present(np.sort(shortlist))
    return present, cosine_distance(query[None] @ vectors.T)[0]


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_search_and_rerank_equal_in_memory_and_brute_force(rng: np.random.Generator, tmp_path: Path, shards: int) -> None:
    vectors = unit_vectors(rng, 3000, DIM)
    ids = rng.permutation(50_000)[:3000].astype(np.int64)
    mapped, heap = _pair(tmp_path, shards)
    for part in np.array_split(np.arange(3000), 7):  # several adds: the files grow and are remapped
        mapped.add(ids[part], vectors[part])
        heap.add(ids[part], vectors[part])
    queries = unit_vectors(rng, 5, DIM)
    for nq in (1, 5):
        for k in (1, 10, 200):
            got, want = mapped.search(queries[:nq], k), heap.search(queries[:nq], k)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
            assert_knn_consistent(*got, exact.inner_products(queries[:nq], vectors), ids, k, ascending=False, atol=1e-5)
    position = {int(i): n for n, i in enumerate(ids)}
    for query in queries:
        shortlist = rng.choice(ids, 400, replace=False)
        present, distances = _rerank(mapped, query, shortlist)
        heap_present, heap_distances = _rerank(heap, query, shortlist)
        np.testing.assert_array_equal(present, heap_present)
        np.testing.assert_array_equal(distances, heap_distances)  # bit-identical to the in-memory path
        truth = 1.0 - vectors[[position[int(i)] for i in present]].astype(np.float64) @ query.astype(np.float64)
        np.testing.assert_allclose(distances, np.clip(truth, 0, 2), atol=1e-6)
        np.testing.assert_array_equal(mapped.score(query, shortlist), heap.score(query, shortlist))


def test_rows_are_not_on_the_heap_and_files_are_unlinked(rng: np.random.Generator, tmp_path: Path) -> None:
    mapped, heap = _pair(tmp_path)
    vectors = unit_vectors(rng, 2000, DIM)
    mapped.add(np.arange(2000), vectors)
    heap.add(np.arange(2000), vectors)
    assert mapped.file_bytes() >= vectors.nbytes
    assert mapped.memory_bytes() < heap.memory_bytes() - vectors.nbytes // 2  # ids and id map only
    assert list((tmp_path / "rows").iterdir()) == []  # nothing to clean up after a crash
    mapped.close()
    assert len(mapped) == 0 and mapped.file_bytes() == 0


def test_deletes_and_upserts_are_honoured(rng: np.random.Generator, tmp_path: Path) -> None:
    mapped, heap = _pair(tmp_path)
    vectors = unit_vectors(rng, 6000, DIM)
    ids = np.arange(6000, dtype=np.int64) + 10
    mapped.add(ids, vectors)
    heap.add(ids, vectors)
    gone = ids[rng.random(6000) < 0.3]
    assert mapped.remove(gone) == heap.remove(gone) == len(gone)
    assert mapped.remove(gone) == 0
    # upsert: remove then add the same ids with new vectors
    again = ids[~np.isin(ids, gone)][:500]
    fresh = unit_vectors(rng, 500, DIM)
    for index in (mapped, heap):
        index.remove(again)
        index.add(again, fresh)
    queries = np.concatenate([vectors[np.isin(ids, gone)][:20], fresh[:5]])
    got, want = mapped.search(queries, 100), heap.search(queries, 100)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert not np.isin(got[1], gone).any()
    np.testing.assert_array_equal(mapped.reconstruct(again), fresh)
    present, _ = mapped.reconstruct_present(np.concatenate([gone[:50], again[:50]]))
    np.testing.assert_array_equal(present, again[:50])
    assert mapped.search(fresh[:5], 1)[1][:, 0].tolist() == again[:5].tolist()


def test_mass_delete_shrinks_into_a_new_file_and_keeps_every_row(rng: np.random.Generator, tmp_path: Path) -> None:
    mapped, _ = _pair(tmp_path, shards=1)
    vectors = unit_vectors(rng, 20_000, DIM)
    mapped.add(np.arange(20_000), vectors)
    before = mapped.file_bytes()
    view = mapped._shards[0].data  # a reader's view of the old mapping stays readable after the swap
    mapped.remove(np.arange(19_000))
    assert mapped.file_bytes() < before // 4
    assert float(view[-1] @ view[-1]) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_array_equal(mapped.reconstruct(np.arange(19_000, 20_000)), vectors[19_000:])
    mapped.add(np.arange(5), vectors[:5])
    np.testing.assert_array_equal(mapped.search(vectors[:5], 1)[1][:, 0], np.arange(5))


def test_a_full_disk_fails_the_add_and_changes_nothing(rng: np.random.Generator, tmp_path: Path, monkeypatch) -> None:
    mapped, _ = _pair(tmp_path)
    vectors = unit_vectors(rng, 600, DIM)
    mapped.add(np.arange(300), vectors[:300])
    calls, real = [], os.posix_fallocate

    def full(fd: int, offset: int, length: int) -> None:
        calls.append(length)
        if len(calls) == 2:  # the second shard's growth fails: the first must not have taken rows
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, offset, length)

    monkeypatch.setattr(_mapped_shard.os, "posix_fallocate", full)
    with pytest.raises(OSError) as caught:
        mapped.add(np.arange(300, 600), vectors[300:])
    assert caught.value.errno == errno.ENOSPC
    assert len(mapped) == 300 and mapped.shard_sizes() == [150, 150]
    np.testing.assert_array_equal(mapped.ids(), np.arange(300))
    monkeypatch.undo()
    mapped.add(np.arange(300, 600), vectors[300:])  # space again: the same add works
    np.testing.assert_array_equal(mapped.reconstruct(np.arange(600)), vectors)


@pytest.mark.parametrize("writer", [MappedFloatIndex, FloatIndex])
def test_snapshots_are_interchangeable_and_streamed(rng: np.random.Generator, tmp_path: Path, monkeypatch, writer) -> None:
    monkeypatch.setattr(mapped_float, "PIECE_BYTES", 7 * DIM * 4)  # 7 rows a piece: many pieces
    vectors = unit_vectors(rng, 1000, DIM)
    source = writer(DIM, shards=2, **({"directory": tmp_path / "rows"} if writer is MappedFloatIndex else {}))
    source.add(np.arange(1000) * 2, vectors)
    source.remove(np.arange(0, 2000, 6))  # holes and moved rows must survive the round trip
    path = tmp_path / "c.float.faiss"
    source.save(path, last_seq=9)
    for shards in (1, 3):
        loaded, seq = MappedFloatIndex.load(path, shards=shards, directory=tmp_path / "rows")
        assert seq == 9 and loaded.shards == shards and isinstance(loaded, MappedFloatIndex)
        np.testing.assert_array_equal(loaded.ids(), source.ids())
        np.testing.assert_array_equal(loaded.reconstruct(source.ids()), source.reconstruct(source.ids()))
        heap, _ = FloatIndex.load(path)
        np.testing.assert_array_equal(heap.search(vectors[:4], 20)[1], loaded.search(vectors[:4], 20)[1])
    empty = MappedFloatIndex(DIM, directory=tmp_path / "rows")
    empty.save(tmp_path / "empty", last_seq=3)
    loaded, seq = MappedFloatIndex.load(tmp_path / "empty", directory=tmp_path / "rows")
    assert seq == 3 and len(loaded) == 0 and loaded.dim == DIM


def test_corrupt_or_truncated_snapshots_are_refused(rng: np.random.Generator, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(mapped_float, "PIECE_BYTES", 64 * DIM * 4)
    index = MappedFloatIndex(DIM, directory=tmp_path / "rows")
    index.add(np.arange(500), unit_vectors(rng, 500, DIM))
    path = tmp_path / "c.float.faiss"
    index.save(path, last_seq=1)
    data = bytearray(path.read_bytes())
    data[-100] ^= 1  # a flipped bit in the last rows: found only after earlier pieces were added
    path.write_bytes(bytes(data))
    with pytest.raises(SnapshotError, match="checksum"):
        MappedFloatIndex.load(path, directory=tmp_path / "rows")
    path.write_bytes(bytes(data[:-50]))
    with pytest.raises(SnapshotError, match="truncated"):
        MappedFloatIndex.load(path, directory=tmp_path / "rows")
    with pytest.raises(SnapshotError, match="no snapshot"):
        MappedFloatIndex.load(tmp_path / "missing", directory=tmp_path / "rows")


def test_searches_during_growth_and_deletes_never_see_a_deleted_id(rng: np.random.Generator, tmp_path: Path) -> None:
    mapped, _ = _pair(tmp_path)
    vectors = unit_vectors(rng, 8000, DIM)
    mapped.add(np.arange(1000), vectors[:1000])
    deleted: set[int] = set()
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        try:
            while not done.is_set():
                before = set(deleted)  # acknowledged before this search began
                _, got = mapped.search(vectors[:8], 50)
                present, rows = mapped.reconstruct_present(got[got >= 0])
                assert not before & set(got.ravel().tolist())
                assert np.isfinite(rows).all() and len(rows) == len(present)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    for start in range(1000, 8000, 500):  # each add grows (remaps) the files while searches run
        mapped.add(np.arange(start, start + 500), vectors[start : start + 500])
        gone = np.arange(start - 1000, start - 800)
        mapped.remove(gone)
        deleted.update(gone.tolist())
    done.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert not np.isin(mapped.ids(), list(deleted)).any()


def test_reserved_room_makes_the_next_add_need_no_allocation(rng: np.random.Generator, tmp_path: Path, monkeypatch) -> None:
    mapped, _ = _pair(tmp_path, shards=3)
    vectors = unit_vectors(rng, 5000, DIM)
    mapped.add(np.arange(100), vectors[:100])
    mapped.reserve(4900)

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_mapped_shard.os, "posix_fallocate", full)
    mapped.add(np.arange(100, 5000), vectors[100:])  # the room was taken before: nothing to allocate now
    np.testing.assert_array_equal(mapped.reconstruct(np.arange(5000)), vectors)
