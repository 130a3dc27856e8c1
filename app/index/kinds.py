"""Index kinds of a collection's binary codes, and the arithmetic that sizes the sublinear one.

* ``flat``: exact Hamming scan of every code (:class:`~app.index.binary_index.BinaryIndex`).
* ``ivf``: FAISS ``IndexBinaryIVF`` (:class:`~app.index.ivf.BinaryIVF`): codes are bucketed by
  their nearest of ``nlist`` trained centroids, and a query scans only the ``nprobe`` nearest
  buckets.
* ``auto``: flat until the collection holds ``index.auto_ivf_windows`` codes (a setting), then
  ivf, trained in the background while flat keeps answering.

Why IVF and not HNSW or multi-index hashing (bench/index/index_kinds.py, bench/results/index_kinds.json,
clustered 256- and 512-bit codes, one query at a time): at 10^6 x 256 bits IVF (4096 lists, nprobe 64)
reaches recall@10 0.99 against exact flat search in 0.17 ms, where ``IndexBinaryHNSW`` (M=32) reaches
0.93 at efSearch 128 in 0.31 ms and took longer to build (231 s against 171 s); ``IndexBinaryMultiHash``
needs nflip=2 and 16 tables for 0.985, at 96 ms, slower than the flat scan (1.3 ms). Besides, HNSW cannot
remove a vector (deletes and upserts would need tombstones and an ever-growing graph) and costs
2 x M x 4 bytes of links per code (256 bytes at M=32, eight times a 256-bit code), and multi-hash has
no removal either; IVF removes ids natively, stores a code plus an 8-byte id, and its one knob
(nprobe) trades recall for time predictably.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KINDS = ("auto", "flat", "ivf")
# Where a collection's float vectors live: on the heap, or in memory-mapped files
# (app/index/mapped_float.py) so that only the pages two-stage re-ranking reads need be in RAM.
FLOAT_STORES = ("memory", "mmap")

# FAISS warns below 39 training points per centroid: fewer leave centroids badly placed.
MIN_POINTS_PER_LIST = 39
# An ivf collection answers from flat below this many codes: such a scan takes ~0.1 ms, and a
# handful of points per list would train nothing useful.
IVF_MIN_WINDOWS = 10_000
# Bounds of the tunables (also the API's ge/le): 2^16 lists is past any size one machine holds.
MAX_NLIST = 65_536
MIN_NLIST = 16
# Auto nlist stays at or below this (see auto_nlist for the measurements behind it).
AUTO_MAX_NLIST = 2048
# A query probes enough lists to read about this many codes (the default nprobe, rounded up to a power
# of two): the work per query stays constant as the collection grows, which is what makes it sublinear.
SCAN_CODES = 8192
# An auto-sized IVF is retrained once the collection is this many times larger than what it was
# trained on: its lists have grown long, and the centroids no longer reflect the data.
RETRAIN_GROWTH = 4


@dataclass(frozen=True)
class IndexSpec:
    """A collection's index choice, stored in the catalog.

    Args:
        kind: "auto", "flat" or "ivf".
        nlist: IVF lists; None picks ~sqrt(n) from the count at training (see :func:`auto_nlist`).
        nprobe: lists a query scans by default; None: :func:`default_nprobe` of nlist.
        floats: where the float vectors live, "memory" (the default) or "mmap".
    """

    kind: str = "auto"
    nlist: int | None = None
    nprobe: int | None = None
    floats: str = "memory"

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"index kind must be one of {list(KINDS)}, got {self.kind!r}")
        if self.floats not in FLOAT_STORES:
            raise ValueError(f"index floats must be one of {list(FLOAT_STORES)}, got {self.floats!r}")
        for name, low, high in (("nlist", MIN_NLIST, MAX_NLIST), ("nprobe", 1, MAX_NLIST)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high):
                raise ValueError(f"index {name} must be an integer in [{low}, {high}], got {value!r}")
        if self.nlist is not None and self.nprobe is not None and self.nprobe > self.nlist:
            raise ValueError(f"index nprobe ({self.nprobe}) cannot exceed nlist ({self.nlist})")
        if self.kind == "flat" and (self.nlist is not None or self.nprobe is not None):
            raise ValueError("a flat index has no nlist or nprobe; use kind 'ivf' or 'auto'")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "nlist": self.nlist, "nprobe": self.nprobe, "floats": self.floats}

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> "IndexSpec":
        if not value:
            return cls()
        return cls(kind=value.get("kind", "auto"), nlist=value.get("nlist"), nprobe=value.get("nprobe"),
                   floats=value.get("floats") or "memory")  # specs stored before the setting have none

    def trains_at(self, auto_windows: int) -> int | None:
        """Codes the collection must hold before an IVF is trained; None: never."""
        if self.kind == "flat" or (self.kind == "auto" and auto_windows <= 0):
            return None
        floor = IVF_MIN_WINDOWS if self.kind == "ivf" else max(auto_windows, IVF_MIN_WINDOWS)
        return max(floor, MIN_POINTS_PER_LIST * (self.nlist or MIN_NLIST))


def auto_nlist(n: int) -> int:
    """Lists for ``n`` codes: the power of two nearest sqrt(n), at most AUTO_MAX_NLIST (2048), and never more
    than 39 training codes per list allow: 10^5 -> 256, 10^6 -> 1024, 10^7 and up -> 2048.

    Why sqrt(n) and not FAISS' 4 sqrt(n) (which gave 4096 from 10^6 up), from bench/results/scale.json (real-audio
    256-bit codes, 200 held-out real queries; the run with this rule, refined and capped lists): recall@10 at
    nprobe 8 was 0.974 with 1024 lists at 10^6, 0.934 with 2048 at 10^7 and 0.966 with 2048 at 10^8, and at
    nprobe 16 0.995, 0.987 and 0.995: real codes cluster tightly, so few lists reach the recall target (the run
    before, 1024 lists at 10^7 gave 0.981 at nprobe 8: `git show 914980c:bench/results/scale.json`). Lists cost at build time: k-means ~nlist^2 (4096 lists: 310 s
    at 10^6 on the busy machine, 1024: 81 s) and adding a code compares it with every centroid (10^8 codes into
    2048 lists: 307 CPU-seconds, most of the 10^8 build), so 4x the lists is ~16x the training and 4x the filling.
    At a query, one centroid costs as much as one code scanned; the cap of 2048 keeps that below the ~8,192 codes
    the default nprobe reads (SCAN_CODES). The older rule's 4096 came from a synthetic mixture of 2048 centres
    (bench/results/index_kinds.json), which real embeddings do not have.
    """
    if n < MIN_POINTS_PER_LIST * 2 * MIN_NLIST:
        return MIN_NLIST
    power = round(math.log2(math.sqrt(n)))
    trainable = int(math.log2(n // MIN_POINTS_PER_LIST))  # every list gets its 39 training points
    return int(min(AUTO_MAX_NLIST, max(MIN_NLIST, 2 ** min(power, trainable))))


def default_nprobe(nlist: int, n: int) -> int:
    """Lists a query scans unless it says otherwise: enough to read ~SCAN_CODES of the ``n`` codes the
    IVF was trained on, as a power of two, at least 16 (all lists when fewer).

    Measured (bench/results/index_kinds.json, clustered codes, one query at a time): 10^6 x 256 bits,
    4096 lists -> nprobe 64: recall@10 0.99 against exact flat search at 0.17 ms (flat: 1.3 ms);
    10^5, 1024 lists -> 128: 0.955.
    """
    wanted = max(16, math.ceil(SCAN_CODES * nlist / max(n, 1)))
    return int(min(nlist, 2 ** math.ceil(math.log2(wanted))))
