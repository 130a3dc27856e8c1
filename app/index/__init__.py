"""Vector indices: binary codes by Hamming distance and unit floats by inner product.

Usage (the catalog chooses ids; the index only caches its rows)::

    binary = BinaryIndex(bits=256, shards=2)
    binary.add(segment_ids, codes)                    # codes: (n, 32) uint8, packbits "little"
    distances, ids = binary.search(query_codes, k)    # int32 ascending; PAD_ID / HAMMING_PAD pad
    binary.remove(old_segment_ids)                    # upsert = remove, then add
    binary.save(path, last_seq=seq)                   # atomic + checksummed
    binary, seq = BinaryIndex.load(path, shards=2)    # SnapshotError -> rebuild from the catalog

    floats = FloatIndex(dim=128)                      # rows must be L2-normalised float32
    sims, ids = floats.search(query_vectors, k)       # float32 cosine, descending; -inf / PAD_ID pad
    exact = floats.score(query_vector, shortlist)     # two-stage re-rank of Hamming candidates
    floats = MappedFloatIndex(dim=128, directory=d)   # the same, rows in memory-mapped files (off the heap)

    codes = AdaptiveBinaryIndex(256, spec=IndexSpec("ivf"))   # flat, plus an IVF once trained
    codes.maybe_build()                               # background train + atomic swap (app.index.adaptive)
    codes.search(query_codes, k, nprobe=64)           # IVF answers once built; exact before

Pass many queries in one ``search`` call when they arrive together: a batch shares one scan.
See :mod:`app.index.base` for the interface.
"""

from app.index.hamming.shared_scan import warm_up as _warm_up_shared
from app.index.hamming.select import warm_up as _warm_up_select
from app.index.hamming.single import warm_up as _warm_up_single
from app.index.adaptive import AdaptiveBinaryIndex
from app.index.base import PAD_ID, DuplicateIdError, SnapshotError, VectorIndex
from app.index.binary_index import HAMMING_PAD, BinaryIndex
from app.index.float_index import FloatIndex, cosine_distance
from app.index.ivf import BinaryIVF
from app.index.mapped_float import MappedFloatIndex
from app.index.kinds import IndexSpec


def warm_up_hamming_kernels() -> None:
    """Compile (or load from numba's cache) the shared-scan, one-query and counting kernels."""
    _warm_up_shared()
    _warm_up_single()
    _warm_up_select()


__all__ = [
    "AdaptiveBinaryIndex",
    "BinaryIVF",
    "HAMMING_PAD",
    "IndexSpec",
    "PAD_ID",
    "BinaryIndex",
    "DuplicateIdError",
    "FloatIndex",
    "MappedFloatIndex",
    "SnapshotError",
    "VectorIndex",
    "cosine_distance",
    "warm_up_hamming_kernels",
]
