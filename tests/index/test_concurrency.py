"""Searches from many threads while writers add and remove: no crash, consistent end state."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from app.index import BinaryIndex, FloatIndex
from app.index._rwlock import ReadWriteLock
from tests.index.conftest import random_codes, unit_vectors


def test_concurrent_searches_and_writes_end_consistent() -> None:
    rng = np.random.default_rng(7)
    index = BinaryIndex(256, shards=2)
    index.parallel_min_rows = 0  # use the scan pool even though the index is small
    base = random_codes(rng, 5000, 256)
    index.add(np.arange(5000), base)
    errors: list[BaseException] = []
    stop = threading.Event()
    removed: set[int] = set()

    def searcher(seed: int) -> None:
        local = np.random.default_rng(seed)
        try:
            while not stop.is_set():
                queries = random_codes(local, int(local.integers(1, 8)), 256)
                d, labels = index.search(queries, 10)
                # Every answer is well formed even while rows move underneath.
                assert (labels >= 0).all() and (np.diff(d, axis=1) >= 0).all()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    def writer() -> None:
        local = np.random.default_rng(99)
        try:
            for step in range(60):
                new_ids = np.arange(10_000 + 50 * step, 10_000 + 50 * (step + 1))
                index.add(new_ids, random_codes(local, 50, 256))
                gone = local.choice(5000, 40, replace=False)
                index.remove(gone)
                removed.update(int(i) for i in gone)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=searcher, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    w = threading.Thread(target=writer)
    w.start()
    w.join(timeout=60)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[0]
    expected = np.union1d(np.setdiff1d(np.arange(5000), sorted(removed)), np.arange(10_000, 13_000))
    np.testing.assert_array_equal(index.ids(), expected)
    survivors = np.setdiff1d(np.arange(5000), sorted(removed))[:50]
    d, labels = index.search(base[survivors], 1)
    assert (d[:, 0] == 0).all() and (labels[:, 0] == survivors).all()


def test_concurrent_float_searches_agree_with_serial() -> None:
    rng = np.random.default_rng(3)
    index = FloatIndex(32, shards=2)
    index.parallel_min_rows = 0
    index.add(np.arange(3000), unit_vectors(rng, 3000, 32))
    queries = unit_vectors(rng, 8, 32)
    expected = index.search(queries, 5)[1]
    results: list[np.ndarray] = []

    def run() -> None:
        for _ in range(20):
            results.append(index.search(queries, 5)[1])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == 80 and all(np.array_equal(r, expected) for r in results)


def test_rwlock_writer_excludes_readers_and_is_not_starved() -> None:
    lock = ReadWriteLock()
    inside = {"readers": 0, "writer": False}
    violations: list[str] = []
    guard = threading.Lock()
    stop = threading.Event()
    writes = 0

    def reader() -> None:
        while not stop.is_set():
            with lock.read():
                with guard:
                    inside["readers"] += 1
                    if inside["writer"]:
                        violations.append("reader inside with writer")
                time.sleep(0.0005)
                with guard:
                    inside["readers"] -= 1

    def writer() -> None:
        nonlocal writes
        for _ in range(50):
            with lock.write():
                with guard:
                    if inside["readers"]:
                        violations.append("writer inside with readers")
                    inside["writer"] = True
                time.sleep(0.0002)
                with guard:
                    inside["writer"] = False
            writes += 1

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for t in readers:
        t.start()
    w = threading.Thread(target=writer)
    w.start()
    w.join(timeout=30)
    stop.set()
    for t in readers:
        t.join(timeout=30)
    assert writes == 50, "writer starved by a steady stream of readers"
    assert not violations, violations[:3]


def test_snapshots_taken_during_writes_are_consistent(tmp_path: Path) -> None:
    # Each snapshot must capture one state between writes: the ids it holds are exactly the
    # ids added before it (adds are sequential ranges here), never a half-applied add.
    from app.index import BinaryIndex as Index

    rng = np.random.default_rng(11)
    index = Index(64, shards=2)
    codes = random_codes(rng, 4000, 64)
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for step in range(40):
                index.add(np.arange(100 * step, 100 * (step + 1)), codes[100 * step : 100 * (step + 1)])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            done.set()

    w = threading.Thread(target=writer)
    w.start()
    seen = 0
    while not done.is_set() or seen == 0:
        path = tmp_path / f"snap{seen}"
        index.save(path, last_seq=seen)
        loaded, seq = Index.load(path)
        ids = loaded.ids()
        assert seq == seen and len(ids) % 100 == 0
        np.testing.assert_array_equal(ids, np.arange(len(ids)))
        np.testing.assert_array_equal(loaded.reconstruct(ids), codes[: len(ids)])
        seen += 1
    w.join(timeout=60)
    assert not errors, errors[0]
