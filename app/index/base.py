"""The index interface shared by the binary (Hamming) and float (inner product) indices.

Both kinds hold vectors under stable int64 ids chosen by the caller (segment ids from the
catalog) and answer k-nearest-neighbour searches. They differ in what a score means:

* :class:`~app.index.binary_index.BinaryIndex` returns Hamming **distances** (int32, smaller
  is better, sorted ascending);
* :class:`~app.index.float_index.FloatIndex` returns inner-product **similarities** (float32,
  cosine for unit vectors, larger is better, sorted descending).

Missing results (fewer than k vectors) are padded with id :data:`PAD_ID` and the kind's worst
value (see each class). Indices are caches of the catalog: a snapshot that cannot be trusted
raises :class:`SnapshotError`, and the caller rebuilds from the catalog.
"""

from __future__ import annotations

import os
from typing import Protocol, Self, runtime_checkable

import numpy as np

PAD_ID = -1
"""Id used to pad search results when fewer than k vectors exist."""


class SnapshotError(Exception):
    """A snapshot file is missing, truncated, corrupt or of the wrong kind or width."""


class DuplicateIdError(ValueError):
    """``add`` was given an id that is already in the index (remove it first to upsert)."""


@runtime_checkable
class VectorIndex(Protocol):
    """What the catalog, the search pipeline and the snapshots need from an index.

    Implementations are thread-safe: searches run concurrently with each other, and writes
    (``add``, ``remove``) exclude searches while they run.
    """

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add vectors under new ids; raises DuplicateIdError / ValueError, adding nothing."""
        ...

    def remove(self, ids: np.ndarray) -> int:
        """Remove ids; unknown ids are ignored. Returns how many were removed."""
        ...

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(scores, ids)``, each ``(nq, k)``, best first, padded with PAD_ID."""
        ...

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """Return the stored vectors of ``ids`` in the order given; KeyError for unknown ids."""
        ...

    def reconstruct_present(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(ids still present, their vectors)`` in the order given, skipping unknown ids."""
        ...

    def ids(self) -> np.ndarray:
        """All ids, sorted ascending."""
        ...

    def __len__(self) -> int: ...

    def memory_bytes(self) -> int:
        """Bytes of memory held (vectors, ids, id map, spare capacity)."""
        ...

    def save(self, path: str | os.PathLike[str], last_seq: int) -> None:
        """Write an atomic, checksummed snapshot including ``last_seq``."""
        ...

    @classmethod
    def load(cls, path: str | os.PathLike[str], shards: int = 2) -> tuple[Self, int]:
        """Read a snapshot; returns ``(index, last_seq)``; SnapshotError if unusable."""
        ...
