"""Pick whichever of two interchangeable ways to run a call has been faster lately.

Why (issue 35): a lone text query's MiniLM forward can run its products on one onnxruntime thread or on
two (app/encoders/image_text/minilm_int8.py), and a lone audio query's speech front-end can take both cores
before the sounds half runs beside the head (app/encoders/audio/routed_fusion.py); either way gives the same bits. On the quiet 2-core machine two
threads took 3.0 ms against 3.9, but while a background job (the training runs this machine shares its
cores with, at nice 19) kept the other core busy they took 7.7 ms against 4.1: the second thread waited
to be scheduled at every product. The process cannot see that from its own requests, so it measures:
each call runs the way with the lower recent time (an exponential average), and every ``explore``-th
call runs the other way, so a change in the machine's load is noticed within a few dozen queries.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, TypeVar

T = TypeVar("T")


class FasterPath:
    """``run(first, second)`` calls one of two equivalent zero-argument callables and times it."""

    def __init__(self, explore: int = 16, weight: float = 0.2, clock: Callable[[], float] = time.perf_counter) -> None:
        self.explore, self.weight, self.clock = explore, weight, clock
        self.average: list[float | None] = [None, None]  # seconds per call, of each way
        self.calls = 0
        self._lock = threading.Lock()

    def choice(self) -> int:
        """0 or 1: the way the next call takes (each untried way first, then the faster, now and then the other)."""
        with self._lock:
            self.calls += 1
            first, second = self.average
            if first is None or second is None:
                return 0 if first is None else 1
            faster = 0 if first <= second else 1
            return 1 - faster if self.calls % self.explore == 0 else faster

    def run(self, first: Callable[[], T], second: Callable[[], T]) -> T:
        way = self.choice()
        started = self.clock()
        result = (first, second)[way]()
        elapsed = self.clock() - started
        with self._lock:
            old = self.average[way]
            self.average[way] = elapsed if old is None else old + self.weight * (elapsed - old)
        return result
