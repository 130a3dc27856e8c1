"""One shard whose rows live in a memory-mapped file instead of the heap.

Same contract as :class:`~app.index._shard.Shard` (a contiguous block of live rows that FAISS
and numpy read without a copy, O(removed) deletes), so every scan, gather and snapshot of
:class:`~app.index._sharded.ShardedIndex` works on it unchanged. What changes is where the bytes
are: in the page cache of a file, which the kernel fills on demand and may evict under pressure,
so a collection's float vectors need not fit in RAM (two-stage search reads only the shortlist's
rows). The row ids stay on the heap (8 bytes per row): every delete and lookup needs them.

Why an unlinked temporary file (``tempfile.TemporaryFile``, O_TMPFILE on Linux): the file is a
cache of the catalog like the heap arrays it replaces; a restart rebuilds it from the snapshot and
the catalog, so it never has to survive the process. Unlinked, it disappears with the process,
``kill -9`` included, and no stale file can ever be mistaken for current data.

Why ``posix_fallocate`` before mapping: a write fault on a page the filesystem cannot allocate
(a full disk) is a SIGBUS that kills the process. Allocating the blocks first turns that into an
ordinary ``OSError(ENOSPC)`` from :meth:`reserve`, raised before any row is written.
"""

from __future__ import annotations

import logging
import mmap
import os
import tempfile
from pathlib import Path
from typing import IO

import numpy as np

from app.index._shard import Shard

log = logging.getLogger(__name__)

# Capacity never below this many rows: a mapping must be at least one page, and tiny remaps are waste.
_MIN_ROWS = 256


class MappedShard(Shard):
    """Rows of one shard in a file mapping (see the module docstring for why).

    Args:
        width: elements per row.
        dtype: element type.
        directory: where the (unlinked) backing file is created; created if missing.
    """

    def __init__(self, width: int, dtype: type[np.generic], directory: Path) -> None:
        super().__init__(width, dtype)
        self.directory = Path(directory)
        self._file: IO[bytes] | None = None  # created on the first reserve: an empty shard has no file
        self._row_bytes = width * self.dtype.itemsize

    def nbytes(self) -> int:
        """Heap bytes held: the ids only (the rows are in the file; see :meth:`file_bytes`)."""
        return self._ids.nbytes

    def file_bytes(self) -> int:
        """Bytes of the backing file (capacity, not just live rows)."""
        return self._data.nbytes if self._file is not None else 0

    def _reserve(self, needed: int) -> None:
        if needed <= len(self._ids):
            return
        capacity = max(needed, 2 * len(self._ids), _MIN_ROWS)
        if self._file is None:
            self._file = _new_file(self.directory)
        # Growing the same file keeps the rows already written where they are: no copy, unlike the
        # heap's doubling. Mappings of the old size stay valid, so a reader still holding one is safe.
        os.posix_fallocate(self._file.fileno(), 0, capacity * self._row_bytes)
        data = _map(self._file, capacity, self.width, self.dtype)
        ids = np.empty(capacity, dtype=np.int64)
        ids[: self.size] = self.ids
        self._data, self._ids = data, ids

    def _shrink_if_sparse(self) -> None:
        # As the heap shard does, give space back after mass deletes (with the same hysteresis). The
        # smaller copy goes to a new file: truncating the mapped one would turn a read of the cut-off
        # tail through a mapping still alive into a SIGBUS.
        if not (len(self._ids) > 4096 and self.size < len(self._ids) // 4):
            return
        capacity = max(2 * self.size, _MIN_ROWS)
        try:
            new_file = _new_file(self.directory)
            os.posix_fallocate(new_file.fileno(), 0, capacity * self._row_bytes)
            data = _map(new_file, capacity, self.width, self.dtype)
        except OSError as exc:  # keeping the larger file is always correct; a remove must not fail here
            log.warning("%s: could not shrink a float shard's file (%s); keeping it", self.directory, exc)
            return
        data[: self.size] = self.data
        old = self._file
        self._data, self._ids, self._file = data, self._ids[:capacity].copy(), new_file
        if old is not None:
            old.close()  # the unlinked file's blocks are freed once its last mapping goes too

    def close(self) -> None:
        """Drop the mapping and the file (the shard is empty afterwards)."""
        self._data = np.empty((0, self.width), dtype=self.dtype)
        self._ids = np.empty(0, dtype=np.int64)
        self.size = 0
        if self._file is not None:
            self._file.close()
            self._file = None


def _new_file(directory: Path) -> IO[bytes]:
    directory.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryFile(dir=directory, prefix=".floats-")


def _map(file: IO[bytes], rows: int, width: int, dtype: np.dtype) -> np.ndarray:
    # mmap keeps its own duplicate of the descriptor, so the mapping outlives a later close of `file`
    region = mmap.mmap(file.fileno(), rows * width * dtype.itemsize, flags=mmap.MAP_SHARED)
    return np.frombuffer(region, dtype=dtype).reshape(rows, width)
