"""Snapshot file format and atomic writes.

Layout (little-endian)::

    header  magic "RECALLIX" | u32 version | u32 kind | u32 width | i64 last_seq | i64 count
    ids     count x int64
    rows    count x row_bytes (uint8 codes or float32 vectors, C order)
    digest  sha256 of everything above

The digest catches torn and bit-rotted files; the exact size check catches truncation before
anything is parsed. Writes go to a temporary file in the same directory, are fsynced, renamed
over the target and the directory is fsynced, so a crash leaves either the old snapshot or
the new one, never a mix.
"""

from __future__ import annotations

import hashlib
import os
import struct
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from app.index.base import SnapshotError

MAGIC = b"RECALLIX"
VERSION = 1
_HEADER = struct.Struct("<8sIIIqq")
_DIGEST_BYTES = hashlib.sha256().digest_size
# Stream in pieces so hashing and writing never need a second full copy in memory.
_CHUNK_BYTES = 16 << 20


@dataclass
class Snapshot:
    """Contents of a snapshot file."""

    kind: int
    width: int
    last_seq: int
    ids: np.ndarray
    rows: np.ndarray
    total: int = -1  # rows in the whole file (a piece of it holds fewer)


def write_snapshot(
    path: str | os.PathLike[str],
    *,
    kind: int,
    width: int,
    last_seq: int,
    ids: Sequence[np.ndarray],
    rows: Sequence[np.ndarray],
) -> None:
    """Write a snapshot atomically.

    Args:
        path: final file name; its directory must exist.
        kind: index kind code (checked again on load).
        width: bits or dimensions.
        last_seq: last catalog sequence the rows include.
        ids: id blocks, aligned with ``rows``.
        rows: row blocks (C-contiguous arrays), concatenated in order.
    """
    path = Path(path)
    count = sum(len(block) for block in ids)
    digest = hashlib.sha256()

    def write(f: BinaryIO) -> None:
        def put(data: bytes | memoryview) -> None:
            digest.update(data)
            f.write(data)

        put(_HEADER.pack(MAGIC, VERSION, kind, width, last_seq, count))
        for block in ids:
            _stream(np.ascontiguousarray(block, dtype="<i8"), put)
        for block in rows:
            _stream(np.ascontiguousarray(block), put)
        f.write(digest.digest())

    write_atomically(path, write)


def write_atomically(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """``write`` fills a temporary file beside ``path``, which is fsynced, renamed over ``path`` and its
    directory fsynced: a crash leaves the old file or the new one, never a mix. Every snapshot file
    (the flat indices' here, the IVF's in app/index/ivf.py) is written through this."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def read_snapshot(
    path: str | os.PathLike[str], *, kind: int, row_layout: Callable[[int], tuple[int, np.dtype]]
) -> Snapshot:
    """Read and verify a snapshot.

    Args:
        path: the file.
        kind: the index kind the caller expects.
        row_layout: maps the stored width to ``(elements per row, dtype)``; raises
            ValueError for an impossible width.

    Raises:
        SnapshotError: missing, unreadable, truncated, wrong kind or version, or corrupt.
    """
    pieces = list(read_snapshot_pieces(path, kind=kind, row_layout=row_layout, piece_bytes=None))
    return pieces[0]


def read_snapshot_pieces(
    path: str | os.PathLike[str], *, kind: int, row_layout: Callable[[int], tuple[int, np.dtype]],
    piece_bytes: int | None = _CHUNK_BYTES,
) -> Iterator[Snapshot]:
    """Read a snapshot as consecutive pieces of about ``piece_bytes`` of rows (None: one piece).

    For an index whose rows must not all be on the heap at once (app/index/mapped_float.py): each
    piece's rows are a buffer reused for the next piece, so the caller copies them where they go.
    At least one piece is yielded (empty for an empty snapshot). The checksum covers the whole
    file, so a SnapshotError can come after pieces were yielded: the caller then discards what it
    built from them.

    Raises:
        SnapshotError: as :func:`read_snapshot`.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            head, width, last_seq, count, elements, dtype = _read_header(f, path, kind, row_layout)
            digest = hashlib.sha256(head)
            ids = np.empty(count, dtype="<i8")
            _fill(f, ids, digest)
            ids = ids.astype(np.int64, copy=False)
            row_bytes = max(1, elements * dtype.itemsize)
            step = count if piece_bytes is None else max(1, piece_bytes // row_bytes)
            rows = np.empty((min(step, count), elements), dtype=dtype)
            if count == 0:
                _check_digest(f, digest)
                yield Snapshot(kind=kind, width=width, last_seq=last_seq, ids=ids, rows=rows, total=0)
                return
            for start in range(0, count, step):
                piece = rows[: min(step, count - start)]
                _fill(f, piece, digest)
                if start + len(piece) == count:
                    _check_digest(f, digest)  # before the last piece: a full read is verified before use
                yield Snapshot(kind=kind, width=width, last_seq=last_seq, ids=ids[start : start + len(piece)], rows=piece, total=count)
    except FileNotFoundError as exc:
        raise SnapshotError(f"{path}: no snapshot") from exc
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot read snapshot: {exc}") from exc


def _read_header(
    f: BinaryIO, path: Path, kind: int, row_layout: Callable[[int], tuple[int, np.dtype]]
) -> tuple[bytes, int, int, int, int, np.dtype]:
    """Check everything the header says, and the exact file size, before any row is read."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise SnapshotError(f"{path}: truncated header ({size} bytes)")
    magic, version, got_kind, width, last_seq, count = _HEADER.unpack(head)
    if magic != MAGIC:
        raise SnapshotError(f"{path}: not an index snapshot (bad magic)")
    if version != VERSION:
        raise SnapshotError(f"{path}: snapshot version {version}, expected {VERSION}")
    if got_kind != kind:
        raise SnapshotError(f"{path}: snapshot of index kind {got_kind}, expected {kind}")
    try:
        elements, dtype = row_layout(width)
    except ValueError as exc:
        raise SnapshotError(f"{path}: {exc}") from exc
    row_bytes = elements * dtype.itemsize
    expected = _HEADER.size + count * (8 + row_bytes) + _DIGEST_BYTES
    if count < 0 or size != expected:
        raise SnapshotError(f"{path}: size {size} bytes, expected {expected} for {count} rows (truncated?)")
    return head, width, last_seq, count, elements, dtype


def _check_digest(f: BinaryIO, digest: Any) -> None:
    if f.read(_DIGEST_BYTES) != digest.digest():
        raise SnapshotError(f"{f.name}: checksum mismatch (corrupt snapshot)")


def _stream(array: np.ndarray, put: Callable[[memoryview], None]) -> None:
    flat = memoryview(array.reshape(-1).view(np.uint8))
    for start in range(0, len(flat), _CHUNK_BYTES):
        put(flat[start : start + _CHUNK_BYTES])


def _fill(f, array: np.ndarray, digest) -> None:  # type: ignore[no-untyped-def]
    flat = memoryview(array.reshape(-1).view(np.uint8))
    for start in range(0, len(flat), _CHUNK_BYTES):
        piece = flat[start : start + _CHUNK_BYTES]
        if f.readinto(piece) != len(piece):
            raise SnapshotError(f"{f.name}: truncated while reading")
        digest.update(piece)


def fsync_directory(directory: Path) -> None:
    # The rename is only durable once the directory entry is on disk too.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
