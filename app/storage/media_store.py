"""Uploaded originals on disk, one file per item version.

A new version is written under a fresh name and fsynced before the catalog commit that points
to it; the replaced file is deleted only after that commit. A crash in between leaves at worst
an unreferenced file, never a catalog row pointing at nothing. A write that fails (disk full,
read-only) removes its partial file and raises the domain error (app/storage/disk_errors.py).

While a backup runs (``recall backup`` puts a marker under ``.backups/``) deleted files are moved
under ``.trash/`` instead of unlinked: the backup copies the files its catalog snapshot names,
and one of them may be replaced or deleted by a write that commits after the snapshot. The
marker check comes after the commit that stops referencing a file, so a file unlinked without
the marker was unreferenced before the backup began. The trash is emptied by the first delete
after every backup has ended.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from pathlib import Path

from app.storage.disk_errors import disk_errors

log = logging.getLogger(__name__)

BACKUPS = ".backups"  # one marker file per running backup (names start with '.': never a collection)
TRASH = ".trash"


class MediaStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, collection: str, data: bytes, suffix: str = "") -> str:
        """Store bytes durably; returns the path relative to the store root."""
        relative = f"{collection}/{uuid.uuid4().hex}{suffix[:16]}"
        path = self.root / relative
        with disk_errors(self.root.parent):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "wb") as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
            except BaseException:
                _unlink_quietly(path)  # no half-written original is left behind
                raise
        return relative

    def path(self, relative: str) -> Path:
        return self.root / relative

    def delete(self, relatives: list[str]) -> None:
        """Remove files no committed row references; failures only leave unreferenced files, so they are logged."""
        if not relatives:
            return
        if self.backup_running():
            batch = self.root / TRASH / uuid.uuid4().hex
            for relative in relatives:
                self._move(self.root / relative, batch / relative)
            return
        for relative in relatives:
            _unlink_quietly(self.root / relative)
        self._empty_trash()

    def delete_collection(self, collection: str) -> None:
        directory = self.root / collection
        if not directory.is_dir():
            return
        if self.backup_running():
            self._move(directory, self.root / TRASH / uuid.uuid4().hex / collection)
            return
        for path in directory.iterdir():
            _unlink_quietly(path)
        try:
            directory.rmdir()
        except OSError as exc:
            log.warning("could not remove %s: %s", directory, exc)

    # --- backups -----------------------------------------------------------------------------

    def backup_running(self) -> bool:
        markers = self.root / BACKUPS
        try:
            return any(markers.iterdir())
        except FileNotFoundError:
            return False
        except OSError:
            return True  # cannot tell: keeping a file too long is harmless, losing one is not

    def locate(self, relative: str) -> Path | None:
        """Where the file ``relative`` is now: in place, or in the trash of a running backup."""
        here = self.root / relative
        if here.is_file():
            return here
        trash = self.root / TRASH
        if trash.is_dir():
            for batch in sorted(trash.iterdir()):
                if (batch / relative).is_file():
                    return batch / relative
        return None

    def _move(self, source: Path, target: Path) -> None:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(source, target)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not move %s to the backup trash: %s", source, exc)

    def _empty_trash(self) -> None:
        trash = self.root / TRASH
        if trash.is_dir() and not self.backup_running():
            shutil.rmtree(trash, ignore_errors=True)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:  # read-only filesystem: the file stays, unreferenced
        log.warning("could not remove %s: %s", path, exc)
