"""The SQLite catalog's query-path reads: a connection per thread, beside the writer (app/storage/catalog.py)."""

from __future__ import annotations

import sqlite3
import threading

import numpy as np
import pytest

from app.storage.catalog import Catalog
from tests.storage.test_catalog import _collection, _item


def _catalog(tmp_path) -> Catalog:
    catalog = Catalog(tmp_path / "c.db")
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item("a"), _item("b", n=3)])
    return catalog


def _in_thread(fn):
    """fn() on a new thread, joined (at most 10 s): (its result, whether it finished)."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()))
    thread.start()
    thread.join(10)
    return out.get("value"), not thread.is_alive()


def test_a_search_lookup_does_not_wait_for_an_open_write_and_sees_the_last_commit(tmp_path):
    catalog = _catalog(tmp_path)
    writing, release = threading.Event(), threading.Event()

    def hold_a_write_open():
        with catalog._lock, catalog._transaction():
            catalog._execute("UPDATE items SET filename = ? WHERE collection = ? AND id = ?", ("renamed.wav", "c", "a"))
            catalog._execute("DELETE FROM segments WHERE collection = ? AND item_id = ?", ("c", "b"))
            writing.set()
            release.wait(20)

    writer = threading.Thread(target=hold_a_write_open)
    writer.start()
    try:
        assert writing.wait(10)
        (items, segments, located), finished = _in_thread(lambda: (
            catalog.items_by_id("c", ["a", "b"]),
            catalog.segment_items("c", np.array([1, 2, 3, 4, 5])),
            catalog.segments_of_items("c", ["b"], 4, 8),
        ))
        # on the one locked connection this read waited for the writer (here: 20 s)
        assert finished
        assert items["a"]["filename"] == "a.wav"  # not the open transaction's rename
        assert sorted(segments) == [1, 2, 3, 4, 5] and segments[3][0] == "b"  # nor its delete
        assert list(located["b"][0]) == [3, 4, 5]
    finally:
        release.set()
        writer.join(10)
    (items, segments), _ = _in_thread(lambda: (catalog.items_by_id("c", ["a"]), catalog.segment_items("c", np.array([3, 4, 5]))))
    assert items["a"]["filename"] == "renamed.wav" and segments == {}  # committed: seen by the next read


def test_each_thread_reads_on_its_own_connection_and_an_ended_threads_is_closed(tmp_path):
    catalog = _catalog(tmp_path)
    all_reading, done = threading.Barrier(4), threading.Event()
    connections = []

    def read_then_wait():
        catalog.items_by_id("c", ["a"])
        connections.append(catalog._readers.get())
        all_reading.wait(10)
        done.wait(10)

    threads = [threading.Thread(target=read_then_wait) for _ in range(3)]
    for thread in threads:
        thread.start()
    all_reading.wait(10)
    assert len({id(db) for db in connections}) == 3 and catalog._readers.open_count() == 3
    done.set()
    for thread in threads:
        thread.join(10)
    # those threads have ended: the next thread's first read closes their connections
    (items, _), _ = _in_thread(lambda: (catalog.items_by_id("c", ["a"]), None))
    assert items["a"]["id"] == "a"
    assert catalog._readers.open_count() == 1
    for db in connections:
        with pytest.raises(sqlite3.ProgrammingError):
            db.execute("SELECT 1")


def test_a_thread_keeps_its_connection_across_reads(tmp_path):
    catalog = _catalog(tmp_path)
    (first, second), _ = _in_thread(lambda: (
        (catalog.segment_items("c", np.array([1])), catalog._readers.get())[1],
        (catalog.items_by_id("c", ["b"]), catalog._readers.get())[1],
    ))
    assert first is second


def test_a_reader_connection_cannot_write(tmp_path):
    catalog = _catalog(tmp_path)
    with pytest.raises(sqlite3.OperationalError):
        catalog._readers.get().execute("DELETE FROM items")
    assert catalog.counts("c") == (2, 5)


def test_reads_fail_after_close_as_on_any_closed_catalog(tmp_path):
    catalog = _catalog(tmp_path)
    catalog.items_by_id("c", ["a"])  # this thread has a reader now
    catalog.close()
    with pytest.raises(sqlite3.ProgrammingError):
        catalog.items_by_id("c", ["a"])

    def read_elsewhere():
        try:
            catalog.segment_items("c", np.array([1]))
        except sqlite3.ProgrammingError:
            return "refused"
        return "read"

    assert _in_thread(read_elsewhere) == ("refused", True)
    assert catalog._readers.open_count() == 0
