"""A search's catalog reads run on a connection of their thread's own (issue 35): they must not wait for a
writer's open transaction, must see every committed write (upserts and deletes), and a thread inside its
own write must still read what it has not committed yet."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from app.encoders.base import l2_normalise, sign_codes
from app.storage.catalog import Catalog, Collection, NewItem

DIM, BITS = 8, 8


def _item(item_id: str, n: int, seed: int, meta: dict | None = None) -> NewItem:
    raw = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return NewItem(item_id, None, None, None, meta or {}, np.array([[i * 0.5, i * 0.5 + 1.0] for i in range(n)]),
                   l2_normalise(raw), sign_codes(raw))


def _catalog(tmp_path) -> Catalog:
    catalog = Catalog(tmp_path / "c.db")
    catalog.create_collection(Collection("a", "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 1.0))
    return catalog


def test_reads_on_other_threads_see_each_committed_write_and_delete(tmp_path):
    catalog = _catalog(tmp_path)
    pool = ThreadPoolExecutor(3)
    try:
        catalog.upsert_items("a", [_item("x", 3, 1, {"v": 1}), _item("y", 2, 2)])
        ids = catalog.all_segment_ids("a")
        for _ in range(3):  # every pool thread opens its reader on some call
            assert pool.submit(catalog.items_by_id, "a", ["x", "y"]).result()["x"]["metadata"] == {"v": 1}
        catalog.upsert_items("a", [_item("x", 1, 3, {"v": 2})])  # replaces x's three windows by one
        new_ids = catalog.all_segment_ids("a")
        for _ in range(3):
            assert pool.submit(catalog.items_by_id, "a", ["x"]).result()["x"]["metadata"] == {"v": 2}
            found = pool.submit(catalog.segment_items, "a", np.concatenate([ids, new_ids])).result()
            assert sorted(found) == sorted(new_ids.tolist())
            segments = pool.submit(catalog.segments_of_items, "a", ["x", "y"], DIM, BITS).result()
            assert len(segments["x"][0]) == 1 and len(segments["y"][0]) == 2
        catalog.delete_item("a", "y")
        for _ in range(3):
            assert pool.submit(catalog.items_by_id, "a", ["x", "y"]).result().keys() == {"x"}
            assert len(pool.submit(catalog.item_segments, "a", "y", DIM, BITS).result()[0]) == 0
        # the readers' answers are the writer connection's
        with catalog._lock:
            assert catalog.segment_items("a", new_ids) == pool.submit(catalog.segment_items, "a", new_ids).result()
    finally:
        pool.shutdown()
        catalog.close()
    assert len(catalog._readers) >= 1


def test_a_read_does_not_wait_for_an_open_write_and_sees_only_what_was_committed(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.upsert_items("a", [_item("x", 2, 1)])
    in_write, release = threading.Event(), threading.Event()
    seen_inside: list[dict] = []

    def writer():
        with catalog._lock, catalog._transaction():
            catalog._execute("UPDATE items SET metadata = ? WHERE collection = ? AND id = ?", ('{"v": 9}', "a", "x"))
            seen_inside.append(catalog.items_by_id("a", ["x"]))  # this thread holds the lock: its own write
            in_write.set()
            release.wait(10)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert in_write.wait(10)
        with ThreadPoolExecutor(1) as pool:  # the lock is held: a locked read would block until released
            outside = pool.submit(catalog.items_by_id, "a", ["x"]).result(timeout=5)
        assert outside["x"]["metadata"] == {}
        assert seen_inside[0]["x"]["metadata"] == {"v": 9}
    finally:
        release.set()
        thread.join()
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(catalog.items_by_id, "a", ["x"]).result()["x"]["metadata"] == {"v": 9}
    catalog.close()


def test_closing_the_catalog_closes_every_reader(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.upsert_items("a", [_item("x", 1, 1)])
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda _: catalog.items_by_id("a", ["x"]), range(8)))
    readers = list(catalog._readers)
    assert readers
    catalog.close()
    for reader in readers:
        try:
            reader.execute("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - sqlite3.ProgrammingError: closed
            assert "closed" in str(exc)
        else:
            raise AssertionError("a reader connection outlived its catalog")
