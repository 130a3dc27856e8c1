"""Memory read bandwidth of this machine, measured the way the index scans memory.

A scan over an index bigger than the caches is bound by how fast the cores can stream memory,
so benchmark targets are stated relative to this number, measured in the same run. On a
shared machine the available bandwidth drifts with other jobs, so :class:`BandwidthProbe`
can also be sampled in between the timings it is compared with.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Per-call slice: large enough that numpy's per-call overhead is negligible, small enough
# that both threads interleave finely.
_SLICE_WORDS = (32 << 20) // 8


def _stream(words: np.ndarray) -> int:
    # An integer sum is a single SIMD pass with no temporaries: it reads at memory speed.
    total = 0
    for start in range(0, len(words), _SLICE_WORDS):
        total += int(np.add.reduce(words[start : start + _SLICE_WORDS]))
    return total


class BandwidthProbe:
    """A large array streamed by ``threads`` threads (numpy releases the GIL).

    Args:
        nbytes: array size; must be far larger than the last-level cache.
        threads: reading threads, each over its own contiguous part.
    """

    def __init__(self, nbytes: int = 2 << 30, threads: int = 2) -> None:
        self.threads = threads
        self._words = np.ones(nbytes // 8, dtype=np.uint64)  # ones: pages really allocated
        self._parts = np.array_split(self._words, threads)
        self._pool = ThreadPoolExecutor(threads)
        self.sample()  # the first pass pays for page faults

    @property
    def nbytes(self) -> int:
        return self._words.nbytes

    def sample(self) -> float:
        """One timed pass over the whole array; returns GB/s (1e9 bytes)."""
        start = time.perf_counter()
        list(self._pool.map(_stream, self._parts))
        return self._words.nbytes / (time.perf_counter() - start) / 1e9

    def close(self) -> None:
        """Free the array and the threads."""
        self._pool.shutdown()
        del self._words, self._parts


def read_bandwidth(nbytes: int = 2 << 30, threads: int = 2, repeats: int = 5) -> dict[str, float]:
    """Streaming-read bandwidth.

    Args:
        nbytes: size of the array streamed.
        threads: reading threads.
        repeats: timed passes after one warm-up pass.

    Returns:
        ``{"bytes", "threads", "best_gb_s", "median_gb_s"}``. The array is freed before
        returning.
    """
    probe = BandwidthProbe(nbytes, threads)
    try:
        rates = [probe.sample() for _ in range(repeats)]
    finally:
        probe.close()
    return {
        "bytes": float(nbytes),
        "threads": float(threads),
        "best_gb_s": max(rates),
        "median_gb_s": float(np.median(rates)),
    }


if __name__ == "__main__":
    for n_threads in (1, 2):
        print(n_threads, read_bandwidth(threads=n_threads))
