"""Memory read bandwidth of this machine, measured the way the index scans memory.

A scan over an index bigger than the caches is bound by how fast the cores can stream memory,
so benchmark targets are stated relative to this number, measured in the same run.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# Per-call slice: large enough that numpy's per-call overhead is negligible, small enough
# that both threads interleave finely.
_SLICE_BYTES = 32 << 20


def _stream(words: np.ndarray) -> int:
    # An integer sum is a single SIMD pass with no temporaries: it reads at memory speed.
    total = 0
    for start in range(0, len(words), _SLICE_BYTES // 8):
        total += int(np.add.reduce(words[start : start + _SLICE_BYTES // 8]))
    return total


def read_bandwidth(nbytes: int = 2 << 30, threads: int = 2, repeats: int = 5) -> dict[str, float]:
    """Stream-read a ``nbytes`` array split across ``threads`` threads (numpy releases the GIL).

    Args:
        nbytes: size of the array; must be far larger than the last-level cache.
        threads: reading threads, each over its own contiguous half/part.
        repeats: timed passes (after one warm-up that also faults the pages in).

    Returns:
        ``{"bytes", "threads", "best_gb_s", "median_gb_s"}`` (GB = 1e9 bytes). The array is
        freed before returning.
    """
    words = np.ones(nbytes // 8, dtype=np.uint64)
    parts = np.array_split(words, threads)
    rates = []
    with ThreadPoolExecutor(threads) as pool:
        for attempt in range(repeats + 1):
            start = time.perf_counter()
            list(pool.map(_stream, parts))
            elapsed = time.perf_counter() - start
            if attempt:  # the first pass pays for page faults
                rates.append(words.nbytes / elapsed / 1e9)
    size = words.nbytes
    del words, parts
    return {
        "bytes": float(size),
        "threads": float(threads),
        "best_gb_s": max(rates),
        "median_gb_s": float(np.median(rates)),
    }


if __name__ == "__main__":
    for n_threads in (1, 2):
        print(n_threads, read_bandwidth(threads=n_threads))
