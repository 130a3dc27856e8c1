"""Measuring a binary index, shared by bench/index/index_kinds.py and bench/index/scale.py.

Recall is tie-tolerant (Hamming distances tie often, and any of the tied codes is a right answer);
latency is one query at a time (the service's case); throughput is many client threads each sending
one query at a time; memory is the process's peak resident set.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import resource
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator

import numpy as np

K = 10
TIMING_LOCK = "/tmp/recall-timing.lock"  # every bench whose ms it reports holds this, so two never overlap

Search = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def tie_tolerant_recall(true_d: np.ndarray, got_d: np.ndarray, got_ids: np.ndarray, k: int = K) -> float:
    """Mean over queries of |returned codes within the k-th true distance| / k."""
    kth = true_d[:, k - 1 : k]
    hits = ((got_d[:, :k] <= kth) & (got_ids[:, :k] >= 0)).sum(axis=1)
    return float(np.mean(np.minimum(hits, k) / k))


def latencies(search: Search, queries: np.ndarray, passes: int = 1) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """One query at a time; returns ms stats and the stacked answers.

    With ``passes`` > 1 every query is timed that many times over and the pass with the lowest p50 is reported
    (on a shared machine the least disturbed pass is the index's cost; the others' p50s are kept beside it).
    """
    search(queries[:1])  # warm
    runs, ds, ids = [], [], []
    for number in range(passes):
        times = []
        for i in range(len(queries)):
            t = time.perf_counter()
            d, label = search(queries[i : i + 1])
            times.append((time.perf_counter() - t) * 1000)
            if number == 0:
                ds.append(d[0])
                ids.append(label[0])
        runs.append(np.asarray(times))
    ms = min(runs, key=np.median)
    stats = {"p50_ms": float(np.median(ms)), "p99_ms": float(np.percentile(ms, 99)), "mean_ms": float(ms.mean())}
    if passes > 1:
        stats["p50_ms_passes"] = [float(np.median(r)) for r in runs]
    return stats, np.stack(ds), np.stack(ids)


def throughput(search: Search, queries: np.ndarray, clients: int = 16, per_client: int = 8) -> dict[str, float]:
    """Queries per second with ``clients`` threads, each sending ``per_client`` single queries back to back
    (FAISS releases the GIL while it searches, as it does under the service's request threads)."""
    start = threading.Barrier(clients + 1)

    def client(c: int) -> None:
        start.wait()
        for i in range(per_client):
            row = (c * per_client + i) % len(queries)
            search(queries[row : row + 1])

    with ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(client, c) for c in range(clients)]
        start.wait()
        t = time.perf_counter()
        for f in futures:
            f.result()
        wall = time.perf_counter() - t
    return {"qps": clients * per_client / wall, "clients": clients, "queries": clients * per_client}


def relabel(result: tuple[np.ndarray, np.ndarray], ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A raw FAISS answer (row numbers) in terms of the caller's ids."""
    d, rows = result
    return d, np.where(rows >= 0, ids[np.maximum(rows, 0)], -1)


def peak_rss_bytes() -> int:
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (a build's wall time on a busy machine overstates it)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def current_rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _renice_threads(niceness: int) -> bool:
    """Set every thread of this process (Linux niceness is per thread) to ``niceness``; False where not allowed."""
    try:
        for task in os.listdir("/proc/self/task"):
            os.setpriority(os.PRIO_PROCESS, int(task), niceness)
    except (OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def timing_lock(path: str = TIMING_LOCK, renice: bool = True, enabled: bool = True) -> Iterator[float]:
    """Hold the machine-wide timing lock; yields the seconds spent waiting for it.

    A bench started under ``nice -n 19`` builds at that niceness; with ``renice`` its timed part runs at
    niceness 0 (threads started inside inherit it) where the user may raise priority (root), so the
    other jobs' bulk work at nice 19 does not stretch its milliseconds, then returns to where it was.
    """
    if not enabled:
        yield 0.0
        return
    t = time.perf_counter()
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        waited = time.perf_counter() - t
        raised = renice and before > 0 and _renice_threads(0)
        try:
            yield waited
        finally:
            if raised:
                _renice_threads(before)
            fcntl.flock(handle, fcntl.LOCK_UN)
