"""Sorted-array map from caller ids to (shard, row) locations.

A Python dict costs ~100 bytes per entry (5 M segments would need ~500 MB for the map alone,
three times the binary codes), so the map is two parallel int64 arrays sorted by id and
looked up with ``np.searchsorted``: 16 bytes per entry and vectorised batch lookups.

Segment ids from the catalog grow monotonically, so the common insert appends at the end in
amortised O(m). Deletes only mark entries dead (O(m log n)); the arrays are compacted once
dead entries reach an eighth of them, so a stream of small deletes costs amortised O(m)
instead of an O(n) copy each. Re-inserting a dead id revives its entry in place.
"""

from __future__ import annotations

import numpy as np

# Location encoding: row * _SHARD_SPAN + shard keeps one int64 per entry; -1 marks dead.
_SHARD_SPAN = 1 << 8
MAX_SHARDS = _SHARD_SPAN
_DEAD = -1


def encode(shards: np.ndarray | np.integer | int, rows: np.ndarray) -> np.ndarray:
    """Pack shard numbers and row numbers into one int64 location each."""
    return rows.astype(np.int64) * _SHARD_SPAN + shards


def decode(locations: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of :func:`encode`: return ``(shards, rows)``."""
    return locations % _SHARD_SPAN, locations // _SHARD_SPAN


class IdMap:
    """Id -> location map backed by sorted numpy arrays with spare capacity at the end."""

    def __init__(self) -> None:
        self._keys = np.empty(0, dtype=np.int64)
        self._locs = np.empty(0, dtype=np.int64)
        self._size = 0  # entries in use, dead ones included
        self._dead = 0

    def __len__(self) -> int:
        return self._size - self._dead

    def ids(self) -> np.ndarray:
        """Live ids, sorted ascending (a copy)."""
        keys = self._keys[: self._size]
        return keys[self._locs[: self._size] != _DEAD] if self._dead else keys.copy()

    def nbytes(self) -> int:
        """Bytes held, spare capacity included."""
        return self._keys.nbytes + self._locs.nbytes

    def lookup(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Find ids.

        Returns:
            ``(found, locations)``: a bool mask over ``ids`` and their locations (garbage
            where not found).
        """
        found, positions = self._positions(ids)
        if self._size == 0:
            return found, np.full(len(ids), _DEAD, dtype=np.int64)
        return found, self._locs[positions]

    def insert(self, ids: np.ndarray, locations: np.ndarray) -> None:
        """Add unique ids that are known to be absent (the caller checks)."""
        if len(ids) == 0:
            return
        keys = self._keys[: self._size]
        positions = np.searchsorted(keys, ids)
        inside = positions < self._size
        revive = np.zeros(len(ids), dtype=bool)
        revive[inside] = keys[positions[inside]] == ids[inside]
        if revive.any():  # dead entries of the same ids: bring them back in place
            self._locs[positions[revive]] = locations[revive]
            self._dead -= int(revive.sum())
            ids, locations = ids[~revive], locations[~revive]
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
            positions = np.searchsorted(self._keys[:n], ids)
            self._keys = np.insert(self._keys[:n], positions, ids)
            self._locs = np.insert(self._locs[:n], positions, locations)
        self._size = n + m

    def discard(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Remove unique ids; unknown ones are ignored.

        Returns:
            ``(found, locations)`` as :meth:`lookup` reported them before removal.
        """
        found, positions = self._positions(ids)
        locations = self._locs[positions[found]].copy()
        self._locs[positions[found]] = _DEAD
        self._dead += len(locations)
        if self._dead > max(1024, self._size // 8):
            self._compact()
        return found, locations

    def relocate(self, ids: np.ndarray, locations: np.ndarray) -> None:
        """Point live ids at new locations (after rows moved inside a shard)."""
        if len(ids) == 0:
            return
        found, positions = self._positions(ids)
        if not found.all():
            raise AssertionError("relocate() called with ids that are not in the map")
        self._locs[positions] = locations

    def _positions(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        keys = self._keys[: self._size]
        positions = np.searchsorted(keys, ids)
        found = np.zeros(len(ids), dtype=bool)
        inside = positions < self._size
        found[inside] = (keys[positions[inside]] == ids[inside]) & (self._locs[positions[inside]] != _DEAD)
        positions[~inside] = 0
        return found, positions

    def _compact(self) -> None:
        live = self._locs[: self._size] != _DEAD
        self._keys = self._keys[: self._size][live]
        self._locs = self._locs[: self._size][live]
        self._size = len(self._keys)
        self._dead = 0

    def _reserve(self, needed: int) -> None:
        if needed <= len(self._keys):
            return
        capacity = max(needed, 2 * len(self._keys), 1024)
        keys = np.empty(capacity, dtype=np.int64)
        locs = np.empty(capacity, dtype=np.int64)
        keys[: self._size] = self._keys[: self._size]
        locs[: self._size] = self._locs[: self._size]
        self._keys, self._locs = keys, locs
