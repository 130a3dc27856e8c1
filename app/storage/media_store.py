"""Uploaded originals on disk, one file per item version.

A new version is written under a fresh name and fsynced before the catalog commit that points
to it; the replaced file is deleted only after that commit. A crash in between leaves at worst
an unreferenced file, never a catalog row pointing at nothing.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


class MediaStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def write(self, collection: str, data: bytes, suffix: str = "") -> str:
        """Store bytes durably; returns the path relative to the store root."""
        directory = self.root / collection
        directory.mkdir(parents=True, exist_ok=True)
        relative = f"{collection}/{uuid.uuid4().hex}{suffix[:16]}"
        path = self.root / relative
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        return relative

    def path(self, relative: str) -> Path:
        return self.root / relative

    def delete(self, relatives: list[str]) -> None:
        for relative in relatives:
            (self.root / relative).unlink(missing_ok=True)

    def delete_collection(self, collection: str) -> None:
        directory = self.root / collection
        if directory.is_dir():
            for path in directory.iterdir():
                path.unlink(missing_ok=True)
            directory.rmdir()
