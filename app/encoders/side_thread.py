"""One spare thread for the independent half of a small model call (a lone query's second branch).

Why: a query is one or two windows, and at that size a model's arithmetic cannot use a second
core through torch's intra-op threads (a one-window BLSTM on two OpenMP threads took longer than
on one: app/worker/encoding.py). A model made of independent parts can: ``general-audio``'s speech
BLSTM and its sound-texture statistics do not depend on each other, and torch releases the GIL
inside each operation, so the two overlap on two cores. Large batches (ingest, many concurrent
queries) already keep every core busy and run their parts one after the other.

The side thread inherits torch's process-wide thread count (one for query batches), so it never
starts an OpenMP team of its own beside the caller's.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable, TypeVar

A = TypeVar("A")
B = TypeVar("B")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None


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
