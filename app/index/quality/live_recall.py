"""Recall@10 of the answering IVF on a sample of recent live queries, measured exactly in the background.

The bench measures recall on its own queries; a collection's users ask their own, so the service keeps
1 in ``every`` of the queries its IVF answers (the query code and the nprobe it used) in a ring of the
``size`` most recent, and a background thread re-runs them: the IVF's answer at that nprobe and an exact
flat scan over the same codes, compared with the benches' tie-tolerant recall@10 (a returned code counts
when it lies within the 10th exact distance: Hamming distances tie often, and any tied code is right).

Cost on the query path: one counter step per IVF query, and a 32-byte copy for a sampled one. The
measurement never runs on it: it starts on its own thread once half the ring is new and at least
``interval_s`` have passed since the last one, scans one query at a time on that thread alone (no scan pool)
and sleeps between queries so that it uses at most ``duty`` of one core.

Why the thread runs at nice 10 (as the IVF build) and not 19: each exact scan holds the flat index's read
lock, and a writer waiting for it holds up the writes queued behind it; at nice 19 on a busy machine a 2 ms
scan can stretch to a second. IVF searches never take that lock, so they are not held up either way.

Deleted ids never count: the exact scan reads the codes as they are when it runs (a delete removes an id
from the flat index and the IVF before it is acknowledged), every returned id is looked up again after both
searches, and one that is gone by then is a miss; a query whose exact top 10 lost an id while it was being
measured is left out (``skipped``).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable

import faiss
import numpy as np

log = logging.getLogger(__name__)

K = 10
SAMPLE_EVERY = 16  # 1 in 16 IVF-answered queries is kept
SAMPLE_SIZE = 64  # the most recent 64 kept queries are measured
INTERVAL_S = 60.0  # at most one measurement a minute
DUTY = 0.05  # of one core, while measuring
NICENESS = 10

Search = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]


class LiveRecall:
    """A ring of sampled queries and the last recall measured on them (thread-safe)."""

    def __init__(self, every: int | None = None, size: int | None = None, interval_s: float | None = None,
                 duty: float | None = None) -> None:
        # None: the module's value at construction (read then, so that tests can change them)
        self.every = int(every or SAMPLE_EVERY)
        self.size = int(size or SAMPLE_SIZE)
        self.interval_s = float(INTERVAL_S if interval_s is None else interval_s)
        self.duty = float(duty or DUTY)
        self._seen = 0  # query rows offered so far
        self._count_lock = threading.Lock()  # uncontended: ~0.1 us per search
        self._ring: collections.deque[tuple[np.ndarray, int | None]] = collections.deque(maxlen=self.size)
        self._fresh = 0  # kept since the last measurement started
        self._started_at = time.monotonic()  # the first measurement comes interval_s after the index opens
        self._thread: threading.Thread | None = None
        self.last: dict[str, Any] | None = None

    def offer(self, queries: np.ndarray, nprobe: int | None) -> bool:
        """Called for every IVF-answered search; returns whether a measurement is due now."""
        with self._count_lock:
            before, self._seen = self._seen, self._seen + len(queries)
        first = -(before + 1) % self.every  # the rows whose running number is a multiple of `every`
        if first >= len(queries):
            return False
        for row in range(first, len(queries), self.every):
            self._ring.append((np.array(queries[row], dtype=np.uint8, copy=True), nprobe))
            self._fresh += 1
        return (2 * self._fresh >= self.size and time.monotonic() - self._started_at >= self.interval_s
                and not self.running)

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self, answer: Callable[[np.ndarray, int, int | None], tuple[np.ndarray, np.ndarray]], exact: Search,
              present: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]) -> bool:
        """Measure on a background thread (see :meth:`measure`); False if one is already running."""
        if self.running:
            return False
        self._started_at, self._fresh = time.monotonic(), 0
        self._thread = threading.Thread(target=self._background, args=(answer, exact, present), name="live-recall", daemon=True)
        self._thread.start()
        return True

    def _background(self, *args: Any) -> None:
        try:  # per-thread niceness on Linux (see the module docstring for why 10)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICENESS)
        except (OSError, AttributeError):
            pass
        faiss.omp_set_num_threads(1)  # this thread's FAISS calls (the IVF re-run) on one core, as its scans
        try:
            self.measure(*args, pace=True)
        except Exception:  # noqa: BLE001 - a failed measurement leaves the last one standing; searches are unaffected
            log.exception("live recall measurement failed")

    def measure(self, answer: Callable[[np.ndarray, int, int | None], tuple[np.ndarray, np.ndarray]], exact: Search,
                present: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]], pace: bool = False) -> dict[str, Any] | None:
        """Re-run the sampled queries: ``answer(q, k, nprobe)`` (the index as searches see it), ``exact(q, k)``
        (a flat scan) and ``present(ids)`` (``(ids still indexed, their codes)``). Returns and keeps the result.
        """
        sample = list(self._ring)
        if not sample:
            return None
        self._started_at, self._fresh = time.monotonic(), 0
        started, busy = time.monotonic(), 0.0
        recalls, skipped = [], 0
        for code, nprobe in sample:
            t = time.monotonic()
            query = code[None, :]
            true_d, true_ids = exact(query, K)
            _, got_ids = answer(query, K, nprobe)
            truth = true_ids[0][true_ids[0] >= 0]
            got = got_ids[0][got_ids[0] >= 0]
            alive, codes = present(np.concatenate([truth, got]))
            if not np.isin(truth, alive).all():
                skipped += 1  # a true neighbour was deleted while this query was measured
            else:
                recalls.append(_tie_tolerant(query[0], true_d[0][: len(truth)], got, alive, codes))
            busy += time.monotonic() - t
            if pace:  # keep to `duty` of one core: sleep (1/duty - 1) times what the scan took
                time.sleep((time.monotonic() - t) * (1 / self.duty - 1))
        result = {
            "recall_at_10": float(np.mean(recalls)) if recalls else None,
            "queries": len(recalls), "skipped": skipped,
            "nprobes": sorted({p for _, p in sample if p is not None}) or None,
            "measured_at": time.time(), "busy_s": round(busy, 4),
            "seconds": round(time.monotonic() - started, 3),
            "sampling": f"1 in {self.every} IVF-answered queries, the {self.size} most recent",
        }
        if recalls:
            self.last = result
        return result


def _tie_tolerant(query: np.ndarray, true_d: np.ndarray, got: np.ndarray, alive: np.ndarray, codes: np.ndarray) -> float:
    """Share of the exact top-k matched: returned codes still indexed within the k-th exact distance."""
    wanted = len(true_d)
    if wanted == 0:
        return 1.0
    kth = int(true_d[-1])
    # the returned ids' codes as they are now (looked up after both searches): a gone id is a miss
    by_id = dict(zip(alive.tolist(), range(len(alive))))
    rows = [by_id[i] for i in got.tolist() if i in by_id]
    if not rows:
        return 0.0
    distances = np.unpackbits(np.bitwise_xor(codes[rows], query), axis=1).sum(axis=1)
    return min(int((distances <= kth).sum()), wanted) / wanted
