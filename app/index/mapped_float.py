"""Float vectors off the heap: a :class:`FloatIndex` whose rows live in memory-mapped files.

Two-stage search reads float vectors only for its shortlist (a few hundred rows out of millions),
so they need not be in RAM: 10^8 windows of 128-d floats are 51 GB, the 256-bit codes beside them
3.2 GB. Here each shard's rows are in a file mapping (:class:`~app.index._mapped_shard.MappedShard`)
that the kernel pages in on demand and may evict; ids and the id map stay on the heap.

Everything else is the in-memory index's own code: the same scans, the same gather
(``reconstruct_present``) and therefore bit-identical re-rank scores, the same locking, the same
snapshot file (the same format and kind code, written by the same ``save``), so a snapshot is
interchangeable between the two. Only loading differs: rows are streamed from the snapshot into
the mapping piece by piece instead of being read onto the heap first.

The mapped files are a cache exactly as the heap arrays are: unlinked temporary files that vanish
with the process, rebuilt on start from the snapshot and the catalog (app/storage/index_store.py).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import ClassVar

import numpy as np

from app.index._mapped_shard import MappedShard
from app.index._shard import Shard
from app.index._snapshot import read_snapshot_pieces
from app.index.base import SnapshotError
from app.index.float_index import FloatIndex

# Rows read from a snapshot per piece while loading: the heap holds one piece at a time.
PIECE_BYTES = 16 << 20


class MappedFloatIndex(FloatIndex):
    """:class:`FloatIndex` with its rows in memory-mapped files.

    Args:
        dim: vector dimension.
        shards: blocks scanned in parallel threads (one file each).
        check_norm: as FloatIndex.
        directory: where the unlinked backing files are created (the system temp folder when None).
            Put it on a disk with room for the vectors: a full disk makes ``add`` fail with ENOSPC,
            adding nothing.
    """

    MAPPED: ClassVar[bool] = True

    def __init__(self, dim: int, shards: int = 2, check_norm: bool = True, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory) if directory is not None else Path(tempfile.gettempdir())
        super().__init__(dim, shards=shards, check_norm=check_norm)

    def _new_shard(self, row_width: int, dtype: type[np.generic]) -> Shard:
        return MappedShard(row_width, dtype, self.directory)

    def file_bytes(self) -> int:
        """Bytes of the backing files (``memory_bytes`` counts only the heap: ids and id map)."""
        with self._lock.read():
            return sum(s.file_bytes() for s in self._shards)  # type: ignore[attr-defined]

    def close(self) -> None:
        """Release the mappings and files now rather than at garbage collection; the index is empty after."""
        with self._lock.write():
            for shard in self._shards:
                shard.close()  # type: ignore[attr-defined]
            self._map = type(self._map)()

    @classmethod
    def load(  # type: ignore[override]
        cls, path: str | os.PathLike[str], shards: int = 2, directory: str | os.PathLike[str] | None = None,
    ) -> tuple["MappedFloatIndex", int]:
        """Read a FloatIndex snapshot (either kind wrote it) into mapped files, one piece at a time.

        The heap never holds more than one piece of rows (16 MB); the checksum is verified before
        the last piece is added, and on any error the partly filled index is dropped with its files.

        Raises:
            SnapshotError: as :meth:`FloatIndex.load`.
        """
        index: MappedFloatIndex | None = None
        last_seq = 0
        try:
            for piece in read_snapshot_pieces(path, kind=cls.KIND, row_layout=cls._row_layout, piece_bytes=PIECE_BYTES):
                if index is None:
                    # rows were checked when first added; re-checking norms on load is wasted work
                    index = cls(piece.width, shards=shards, check_norm=False, directory=directory)
                    _reserve(index, len(piece.ids), piece.total)
                index.add(piece.ids, piece.rows)
                last_seq = piece.last_seq
        except ValueError as exc:  # duplicate or negative ids survive a checksum only if written so
            if index is not None:
                index.close()
            raise SnapshotError(f"{path}: inconsistent snapshot: {exc}") from exc
        except BaseException:
            if index is not None:
                index.close()
            raise
        assert index is not None  # read_snapshot_pieces yields at least one piece
        return index, last_seq


def _reserve(index: MappedFloatIndex, first_piece: int, total: int) -> None:
    """Size the files for the whole snapshot at once: one allocation and one mapping per shard."""
    per_shard = -(-max(total, first_piece) // index.shards)
    for shard in index._shards:
        shard.reserve(per_shard)
