"""Which failed writes mean "the disk is full" or "the disk is read-only", as domain errors.

A full or read-only data directory is not a bug and not the client's fault: ingest answers 507
or 503 with the reason, and works again once space is freed (or the filesystem is remounted
read-write) without a restart. The signals differ by layer: ``OSError`` carries an errno
(ENOSPC, EDQUOT, EROFS), SQLite an error code (SQLITE_FULL, SQLITE_READONLY), and some failures
arrive only as a generic I/O error (SQLITE_IOERR, EIO). For those the filesystem itself is asked
(``statvfs``, then a small probe write): read-only, or out of space.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.errors import InsufficientStorage, ServiceError, StorageReadOnly

FULL_ERRNOS = {errno.ENOSPC, errno.EDQUOT}
READ_ONLY_ERRNOS = {errno.EROFS}
# primary result codes (the low byte of an extended code): https://www.sqlite.org/rescode.html
SQLITE_READONLY, SQLITE_IOERR, SQLITE_CANTOPEN, SQLITE_FULL = 8, 10, 14, 13
LOW_SPACE_BYTES = 64 * 1024  # below this, a generic write failure is taken to be the disk filling up

FULL_MESSAGE = ("no space left on the disk of the data directory: nothing of this write was stored; "
                "free space (or grow the volume) and retry, no restart needed")
READ_ONLY_MESSAGE = ("the data directory is on a read-only filesystem: nothing of this write was stored; "
                     "search still works; remount it read-write and retry, no restart needed")


def full() -> InsufficientStorage:
    return InsufficientStorage(FULL_MESSAGE, details={"reason": "disk_full"})


def read_only() -> StorageReadOnly:
    return StorageReadOnly(READ_ONLY_MESSAGE, details={"reason": "read_only"})


def probe(directory: Path) -> ServiceError | None:
    """Ask the filesystem of ``directory`` whether it is read-only or out of space.

    ``statvfs`` first; then a small write, because a filesystem the kernel turned read-only after an
    error (ext4 ``errors=remount-ro``) still reports itself read-write there, but refuses with EROFS.
    """
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    if stat.f_flag & os.ST_RDONLY:
        return read_only()
    if stat.f_bavail * stat.f_frsize < LOW_SPACE_BYTES:
        return full()
    path = Path(directory) / f".write-probe-{uuid.uuid4().hex}"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        return full() if exc.errno in FULL_ERRNOS else read_only() if exc.errno in READ_ONLY_ERRNOS else None
    finally:
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    return None


def classify(exc: BaseException, directory: Path) -> ServiceError | None:
    """The domain error for a failed write, or None when it is not a full or read-only disk."""
    if isinstance(exc, (InsufficientStorage, StorageReadOnly)):
        return exc
    if isinstance(exc, OSError):
        if exc.errno in FULL_ERRNOS:
            return full()
        if exc.errno in READ_ONLY_ERRNOS:
            return read_only()
        if exc.errno == errno.EIO:
            return probe(directory)
        return None
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is None:  # an error raised without a code: its text is all there is
            text = str(exc).lower()
            code = SQLITE_FULL if "disk is full" in text else SQLITE_READONLY if "readonly" in text else SQLITE_IOERR
        primary = code & 0xFF
        if primary == SQLITE_FULL:
            return full()
        if primary == SQLITE_READONLY:
            return read_only()
        if primary in (SQLITE_IOERR, SQLITE_CANTOPEN):
            return probe(directory)
    return None


@contextmanager
def disk_errors(directory: Path) -> Iterator[None]:
    """Re-raise a full or read-only disk as its domain error (the original chained); anything else as is."""
    try:
        yield
    except (OSError, sqlite3.Error) as exc:
        error = classify(exc, directory)
        if error is None or error is exc:
            raise
        raise error from exc
