"""One spare thread for the independent half of a small model call (a lone query's second branch).

Why: a query is one or two windows, and at that size a model's arithmetic cannot use a second
core through torch's intra-op threads (a one-window BLSTM on two OpenMP threads took longer than
on one: app/worker/encoding.py). A model made of independent parts can: ``general-audio``'s speech
BLSTM and its sound-texture statistics do not depend on each other, and torch releases the GIL
inside each operation, so the two overlap on two cores. Large batches (ingest, many concurrent
queries) already keep every core busy and run their parts one after the other.

The side thread inherits torch's process-wide thread count (one for query batches), so it never
starts an OpenMP team of its own beside the caller's.

Only a lone request gets the second core (:func:`spare_core`): with several queries in flight the
other core has their HTTP, decoding and search to do, and two threads per query kept the batches
small. And only where there is a second core to get: the process must be allowed at least two CPUs
(its affinity mask, and a container's CPU quota from the cgroup), and the operator's
``torch_threads`` must be at least two (set to 1 when several replicas share a machine). Interleaved rounds on the 2-core machine (bench/results/query_path.md): at 16 clients
the side thread on every small batch gave 111-118 q/s against 126-135 without it, while at one
client it took the p50 from 18 to 11-16 ms.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Sequence, TypeVar

A = TypeVar("A")
B = TypeVar("B")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_in_flight = 0  # requests being served now (see in_flight); read from model threads, one int
_model_threads: int | None = None  # the operator's torch_threads (set_model_threads); None: not configured
_usable: float | None = None  # usable_cores(), read once


def usable_cores(cgroup_root: Path = Path("/sys/fs/cgroup")) -> float:
    """CPUs this process may run on at once: its affinity mask, capped by a cgroup CPU quota.

    A container started with ``--cpus 1`` still sees every core of its host in ``os.cpu_count()``;
    the quota is in its cgroup (``cpu.max`` in cgroup v2, ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``
    in v1; in a container /sys/fs/cgroup is its own cgroup).
    """
    try:
        cores: float = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    quota = cgroup_cpu_quota(cgroup_root)
    return min(cores, quota) if quota is not None else cores


def cgroup_cpu_quota(root: Path) -> float | None:
    """CPUs' worth of time per period the cgroup at ``root`` allows, or None without a quota."""
    try:
        fields = (root / "cpu.max").read_text().split()  # v2: "max 100000" or "150000 100000"
        if fields and fields[0] != "max":
            return int(fields[0]) / int(fields[1])
        return None
    except (OSError, ValueError, IndexError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())  # v1: -1 means no quota
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota / period if quota > 0 and period > 0 else None
    except (OSError, ValueError):
        return None


def set_model_threads(threads: int) -> None:
    """The operator's thread budget for model work (``torch_threads``); below two, nothing is split."""
    global _model_threads
    _model_threads = threads


def _second_core() -> bool:
    global _usable
    if _usable is None:
        _usable = usable_cores()
    return _usable >= 2 and (_model_threads is None or _model_threads >= 2)


@contextmanager
def in_flight() -> Iterator[None]:
    """Count a request as being served while the block runs (the service's searches use it)."""
    global _in_flight
    with _lock:
        _in_flight += 1
    try:
        yield
    finally:
        with _lock:
            _in_flight -= 1


def has_second_core() -> bool:
    """True when the process may use a second core for model work (its CPUs and ``torch_threads``)."""
    return _second_core()


def spare_core() -> bool:
    """True when the process has a second core for model work and no other request is being served
    beside the current one (then its work has the other core)."""
    return _in_flight <= 1 and _second_core()


def _side_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model-side")
        return _executor


def run_beside(here: Callable[[], A], beside: Callable[[], B]) -> tuple[A, B]:
    """``(here(), beside())``, with ``beside`` on the side thread while ``here`` runs on the caller's.

    An exception from either is raised after both have finished: the side work never outlives
    the call, so a failed batch leaves nothing running that still reads its inputs.
    """
    future = _side_executor().submit(beside)
    try:
        first = here()
    except BaseException:
        wait([future])  # the side work finishes before the error propagates
        raise
    return first, future.result()


def map_beside(fn: Callable[[A], B], items: Sequence[A]) -> list[B]:
    """``[fn(x) for x in items]``, the caller's thread and the side thread taking items in turn.

    For a batch of independent calls that each release the GIL (MiniLM's sentences through
    onnxruntime): whichever thread is free takes the next item, so uneven items even out, and when
    the side thread is still busy with other work the caller simply takes them all. As with
    :func:`run_beside`, the side work never outlives the call and an error is raised after both stop.
    """
    out: list[B] = [None] * len(items)  # type: ignore[list-item]
    order = itertools.count()  # next() is atomic under the GIL: each index is taken once

    def work() -> None:
        while (i := next(order)) < len(items):
            out[i] = fn(items[i])

    future = _side_executor().submit(work)
    try:
        work()
    finally:
        wait([future])
    future.result()
    return out
