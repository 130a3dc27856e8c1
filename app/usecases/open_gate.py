"""Who may open or sync a collection when: one opener per collection, and a gate a Ray rejoin closes.

Cluster mode opens a collection on first use (app/usecases/follower.py): its shard actors start and
build their partitions, seconds on a busy machine and minutes at 10^7 windows. That work was done under
one process-wide lock, so while collection A opened, every request naming B waited for it, and after
:data:`follower.SYNC_WAIT_S` answered 503 collection_opening: the cluster fuzz of 2026-11-27 saw such
503s on ``GET /v1/collections`` and on searches of long-open collections whenever a case had just
created another collection. Now each collection has its own lock, and only requests naming the
collection being opened wait for it.

A Ray rejoin (app/cluster/head_watch.py) still needs every opening to stop: it swaps the connection
the shard handles live on. :meth:`OpenGate.exclusive` closes the gate, waits for the openings under
way to end, and keeps new ones out until the rejoin is done.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator


class OpenGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._locks: dict[str, list] = {}  # name -> [lock, users]; dropped when nobody holds or waits for it
        self._inside = 0  # callers past the gate (holding or waiting for a collection's lock)
        self._closed = False

    @contextmanager
    def collection(self, name: str, timeout: float | None) -> Iterator[bool]:
        """Hold ``name``'s lock; yields False (holding nothing) when ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            admitted = self._cond.wait_for(lambda: not self._closed, _left(deadline))
            if admitted:
                entry = self._locks.setdefault(name, [threading.Lock(), 0])
                entry[1] += 1
                self._inside += 1
        if not admitted:  # a rejoin held the gate all along
            yield False
            return
        try:
            left = _left(deadline)
            got = entry[0].acquire(timeout=-1 if left is None else left)
            try:
                yield got
            finally:
                if got:
                    entry[0].release()
        finally:
            with self._cond:
                entry[1] -= 1
                if not entry[1]:
                    self._locks.pop(name, None)
                self._inside -= 1
                self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """No collection is opened or synced while this is held (the openings under way end first)."""
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._closed = True
            while self._inside:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())
