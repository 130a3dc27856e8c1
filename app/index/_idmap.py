"""Sorted-array map from caller ids to (shard, row) locations.

A Python dict costs ~100 bytes per entry (5 M segments would need ~500 MB for the map alone,
three times the binary codes), so the map is two parallel int64 arrays sorted by id and
looked up with ``np.searchsorted``: 16 bytes per entry and vectorised batch lookups.
Segment ids from the catalog grow monotonically, so the common insert appends at the end in
amortised O(m); an out-of-order insert or a removal costs one O(n) pass.
"""

from __future__ import annotations

import numpy as np

# Location encoding: row * _SHARD_SPAN + shard keeps one int64 per entry.
_SHARD_SPAN = 1 << 8


def encode(shards: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Pack shard numbers and row numbers into one int64 location each."""
    return rows.astype(np.int64) * _SHARD_SPAN + shards


def decode(locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode`: return ``(shards, rows)``."""
    return locations % _SHARD_SPAN, locations // _SHARD_SPAN


MAX_SHARDS = _SHARD_SPAN


class IdMap:
    """Id -> location map backed by sorted numpy arrays with spare capacity at the end."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.int64)
        self._locs = np.empty(0, dtype=np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def keys(self) -> np.ndarray:
        """Sorted ids (a view; do not modify)."""
        return self._keys[: self._size]

    @property
    def locations(self) -> np.ndarray:
        """Locations aligned with :attr:`keys` (a view; do not modify)."""
        return self._locs[: self._size]

    def nbytes(self) -> int:
        """Bytes held, spare capacity included."""
        return self._keys.nbytes + self._locs.nbytes

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Look ids up.

        Args:
            ids: int64 ids, any order, duplicates allowed.

        Returns:
            ``(found, positions)``: a bool mask over ``ids`` and, for each id, its position in
            :attr:`keys` (meaningful only where ``found``).
        """
        keys = self.keys
        pos = np.searchsorted(keys, ids)
        found = np.zeros(len(ids), dtype=bool)
        inside = pos < len(keys)
        found[inside] = keys[pos[inside]] == ids[inside]
        return found, pos

    def insert(self, ids: np.ndarray, locations: np.ndarray) -> None:
        """Add ids that are known to be absent (the caller checks)."""
        if len(ids) == 0:
            return
        order = np.argsort(ids, kind="stable")
        ids, locations = ids[order], locations[order]
        n, m = self._size, len(ids)
        if n == 0 or ids[0] > self._keys[n - 1]:
            self._reserve(n + m)
            self._keys[n : n + m] = ids
            self._locs[n : n + m] = locations
        else:
            pos = np.searchsorted(self.keys, ids)
            keys = np.insert(self.keys, pos, ids)
            locs = np.insert(self.locations, pos, locations)
            self._keys, self._locs = keys, locs
        self._size = n + m

    def delete(self, positions: np.ndarray) -> None:
        """Remove the entries at the given positions of :attr:`keys` (unique positions)."""
        if len(positions) == 0:
            return
        keep = np.ones(self._size, dtype=bool)
        keep[positions] = False
        self._keys = self.keys[keep]
        self._locs = self.locations[keep]
        self._size = len(self._keys)

    def relocate(self, ids: np.ndarray, locations: np.ndarray) -> None:
        """Point existing ids at new locations (after rows moved inside a shard)."""
        if len(ids) == 0:
            return
        found, pos = self.find(ids)
        if not found.all():
            raise AssertionError("relocate() called with ids that are not in the map")
        self._locs[pos] = locations

    def _reserve(self, needed: int) -> None:
        if needed <= len(self._keys):
            return
        capacity = max(needed, 2 * len(self._keys), 1024)
        keys = np.empty(capacity, dtype=np.int64)
        locs = np.empty(capacity, dtype=np.int64)
        keys[: self._size] = self.keys
        locs[: self._size] = self.locations
        self._keys, self._locs = keys, locs
