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
small. Interleaved rounds on the 2-core machine (bench/results/query_path.md): at 16 clients
the side thread on every small batch gave 111-118 q/s against 126-135 without it, while at one
client it took the p50 from 18 to 11-16 ms.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

A = TypeVar("A")
B = TypeVar("B")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_in_flight = 0  # requests being served now (see in_flight); read from model threads, one int


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


def spare_core() -> bool:
    """True unless another request is being served beside the current one (then its work has the other core)."""
    return _in_flight <= 1


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
