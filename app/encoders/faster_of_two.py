"""The faster of two ways to do the same work, chosen per call by how long each took lately.

Why: a lone audio query can put its speech front-end on both cores (app/encoders/audio/routed_fusion.py),
which wins on an idle machine and loses when another process holds the second core: each of the
front-end's twenty convolutions then waits for a thread the scheduler has not run yet. Both ways give the
same answers bit for bit, so which one runs is a question of time only, and the recent past answers it:
each way keeps a moving average of its wall time, the faster one runs, and every ``explore``-th call runs
the other, so a change of load (the other process ends, or starts) is noticed within a few dozen queries.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator


class FasterOfTwo:
    """Per call, way 0 or way 1: the one with the lower moving-average wall time, or, every ``explore``-th
    call, the other. Racing callers can only skew an average (floats written under the GIL)."""

    def __init__(self, explore: int = 16, weight: float = 0.2) -> None:
        if explore < 2 or not 0.0 < weight <= 1.0:
            raise ValueError("explore must be at least 2 and weight in (0, 1]")
        self.explore, self.weight = explore, weight
        self.average: list[float | None] = [None, None]
        self.calls = 0

    def choose(self) -> int:
        self.calls += 1
        if None in self.average:  # each way runs once before either is preferred
            return self.average.index(None)
        best = 0 if self.average[0] <= self.average[1] else 1  # type: ignore[operator]
        return 1 - best if self.calls % self.explore == 0 else best

    def record(self, way: int, seconds: float) -> None:
        before = self.average[way]
        self.average[way] = seconds if before is None else before + self.weight * (seconds - before)

    @contextmanager
    def timed(self) -> Iterator[int]:
        """``with chooser.timed() as way:`` runs the block the chosen way and records how long it took."""
        way = self.choose()
        started = time.perf_counter()
        yield way
        self.record(way, time.perf_counter() - started)
