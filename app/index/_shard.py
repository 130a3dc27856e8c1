"""One shard: a contiguous, growable block of vectors and the ids of its rows.

The vectors live in a C-contiguous numpy array with spare capacity, so the live part
``data[:size]`` can be handed to FAISS' array functions without a copy and scanned at memory
speed. Removal moves the last live rows into the holes (O(removed) row copies) instead of
compacting the whole shard, which is what makes deletes and upserts cheap; rows therefore
have no stable order, and callers track them by id.
"""

from __future__ import annotations

import numpy as np


class Shard:
    """Rows of one shard.

    Args:
        width: elements per row (bytes for binary codes, dimensions for floats).
        dtype: element type of the rows.
    """

    def __init__(self, width: int, dtype: type[np.generic]) -> None:
        self.width = width
        self.dtype = np.dtype(dtype)
        self._data = np.empty((0, width), dtype=self.dtype)
        self._ids = np.empty(0, dtype=np.int64)
        self.size = 0

    @property
    def data(self) -> np.ndarray:
        """Live rows, shape ``(size, width)``, C-contiguous (a view)."""
        return self._data[: self.size]

    @property
    def ids(self) -> np.ndarray:
        """Id of each live row (a view)."""
        return self._ids[: self.size]

    def nbytes(self) -> int:
        """Bytes held, spare capacity included."""
        return self._data.nbytes + self._ids.nbytes

    def reserve(self, needed: int) -> None:
        """Make room for ``needed`` rows in all (an add reserves every shard before writing any, so
        that running out of memory or disk space leaves the index unchanged)."""
        self._reserve(needed)

    def append(self, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """Append rows; return their row numbers."""
        start, m = self.size, len(ids)
        self._reserve(start + m)
        self._data[start : start + m] = rows
        self._ids[start : start + m] = ids
        self.size = start + m
        return np.arange(start, start + m, dtype=np.int64)

    def remove_rows(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove the given (unique) rows by filling holes with rows from the end.

        Returns:
            ``(moved_ids, new_rows)``: ids whose row number changed and where they are now.
        """
        new_size = self.size - len(rows)
        rows = np.sort(rows)
        # Holes below the new end must be filled; survivors at or past it are the fillers.
        # Both are found from the removed rows alone, so removal is O(removed), not O(size).
        holes = rows[rows < new_size]
        fillers = np.setdiff1d(np.arange(new_size, self.size), rows[rows >= new_size], assume_unique=True)
        if len(holes) != len(fillers):  # pragma: no cover - arithmetic invariant
            raise AssertionError("shard compaction miscounted rows")
        self._data[holes] = self._data[fillers]
        self._ids[holes] = self._ids[fillers]
        self.size = new_size
        self._shrink_if_sparse()
        return self._ids[holes].copy(), holes.astype(np.int64)

    def _reserve(self, needed: int) -> None:
        if needed <= len(self._ids):
            return
        # Doubling keeps appends amortised O(1) per row; the floor avoids tiny reallocations.
        capacity = max(needed, 2 * len(self._ids), 256)
        data = np.empty((capacity, self.width), dtype=self.dtype)
        ids = np.empty(capacity, dtype=np.int64)
        data[: self.size] = self.data
        ids[: self.size] = self.ids
        self._data, self._ids = data, ids

    def _shrink_if_sparse(self) -> None:
        # Give memory back after mass deletes, with hysteresis so that alternating
        # add/remove around a boundary does not reallocate every time.
        if len(self._ids) > 4096 and self.size < len(self._ids) // 4:
            capacity = max(2 * self.size, 256)
            self._data = self._data[:capacity].copy()
            self._ids = self._ids[:capacity].copy()
