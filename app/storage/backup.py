"""A consistent copy of a data directory taken while the service keeps writing, and its restore.

The catalog is the source of truth, so a backup is built around one snapshot of it:

1. A marker under ``media/.backups/`` tells the service to move deleted originals to
   ``media/.trash/`` instead of unlinking them (app/storage/media_store.py), so every file the
   snapshot names still exists somewhere while it is copied.
2. SQLite's online backup API copies the catalog in one step: one read transaction, hence one
   committed state S, while writers go on (WAL mode never blocks them on a reader).
3. The originals S references are copied (an original is fsynced before the commit naming it,
   so each one is complete); unreferenced files are not.
4. Index snapshots are copied when they include nothing newer than S; one newer than S would
   hold vectors S does not have, so it is left out and the restored service rebuilds that index
   from the catalog (index snapshots are caches; opening a collection checks them anyway).
5. Judgment files (append-only text, outside the catalog), the binary-code fits of ONNX encoders'
   collections (``posthoc/``) and the hashed API keys (``keys.json``) are copied as they are.

Everything is written under a temporary name next to the destination and renamed into place
last, with a manifest (counts and sha256 of every file), so a half-written backup never looks
like one. Restore checks the manifest and SQLite's integrity before anything lands in the new
data directory, and refuses a directory that is not empty.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import sqlite3
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from app.index._snapshot import _HEADER, MAGIC, fsync_directory
from app.storage.media_store import BACKUPS, MediaStore

FORMAT = 1
MANIFEST = "manifest.json"
CATALOG = "catalog.sqlite3"  # the name app.storage.protocol.open_catalog gives the embedded catalog
INDEX_KINDS = ("binary", "float")
KEYS = "keys.json"  # `recall keys`' file at its default place (settings.keys_file); replaced by rename, so a copy is whole


class BackupError(Exception):
    """The backup or restore cannot be made; the message says why (nothing was left half-done)."""


# --- backup ---------------------------------------------------------------------------------

def backup(data_dir: Path, dest: Path) -> dict[str, Any]:
    """Copy ``data_dir`` (catalog, referenced originals, index snapshots, judgments) to the new folder ``dest``."""
    data_dir, dest = Path(data_dir), Path(dest)
    source = data_dir / CATALOG
    if not source.is_file():
        raise BackupError(f"{source}: no catalog here; is {data_dir} a Recall data directory?")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not an empty folder; back up into a new one")
    started = time.monotonic()
    staging = _staging(dest, "partial")
    store = MediaStore(data_dir / "media")
    marker = store.root / BACKUPS / f"{socket.gethostname()}--{os.getpid()}--{uuid.uuid4().hex}"
    marker.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_markers(marker.parent)
    marker.touch()
    try:
        _copy_catalog(source, staging / CATALOG)
        state = _catalog_state(staging / CATALOG)
        files: dict[str, dict[str, Any]] = {}
        for relative in state.pop("media_paths"):
            files[f"media/{relative}"] = _copy_original(store, relative, staging / "media" / relative)
        skipped = []
        for name, info in state["collections"].items():
            for kind in INDEX_KINDS:
                relative = f"indices/{name}.{kind}.faiss"
                copied = _copy_snapshot(data_dir / relative, staging / relative, upto_seq=info["last_seq"])
                if copied is not None:
                    files[relative] = copied
                elif (data_dir / relative).exists():
                    skipped.append(relative)
        if (data_dir / KEYS).is_file():  # hashed API keys: without them a restored service would run with keys off
            files[KEYS] = _copy(data_dir / KEYS, staging / KEYS)
        # judgments; and the binary-code fits of ONNX encoders' collections (app/usecases/posthoc_codes.py),
        # each written once, before any code made with it is committed, so a copy is whole and not too new
        for folder in (data_dir / "judgments", data_dir / "posthoc"):
            if not folder.is_dir():
                continue
            for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")
                               and not p.name.endswith(".tmp")):
                relative = path.relative_to(data_dir).as_posix()
                files[relative] = _copy(path, staging / relative)
        files[CATALOG] = _describe(staging / CATALOG)
        manifest = {
            "format": FORMAT, "created_at": time.time(), "source": str(data_dir.resolve()),
            "schema_version": state["schema_version"], "collections": state["collections"],
            "files": files, "rebuilt_indices": skipped,
        }
        _write_durably(staging / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True).encode())
        _fsync_tree(staging)
        _land(staging, dest, last=MANIFEST)  # the manifest is what marks a finished backup
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        marker.unlink(missing_ok=True)
    return _summary(manifest, dest, time.monotonic() - started)


def _remove_stale_markers(directory: Path) -> None:
    """Markers left by a backup of this host that was killed outright (its process is gone): without this the
    service would keep moving freed originals to the trash forever. Another host's markers are left alone."""
    for marker in directory.iterdir():
        host, _, rest = marker.name.partition("--")
        pid = rest.partition("--")[0]
        if host != socket.gethostname() or not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            marker.unlink(missing_ok=True)
        except PermissionError:
            pass  # alive, someone else's


def _copy_catalog(source: Path, target: Path) -> None:
    src = sqlite3.connect(source)  # read-write open: a read-only one could not join the running service's WAL
    dst = sqlite3.connect(target)
    try:
        # pages=-1: the whole database in one step, inside one read transaction: one committed state
        src.backup(dst, pages=-1)
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file; the service turns WAL back on
    finally:
        dst.close()
        src.close()


def _copy_original(store: MediaStore, relative: str, target: Path) -> dict[str, Any]:
    """Copy one original from wherever it is: a delete may move it to the trash between finding and opening it
    (once: from the trash nothing moves while the marker is there)."""
    for _ in range(3):
        found = store.locate(relative)
        if found is None:
            break
        try:
            return _copy(found, target)
        except FileNotFoundError:
            continue
    raise BackupError(f"media file {relative} named by the catalog is missing from {store.root}")


def _catalog_state(path: Path) -> dict[str, Any]:
    db = sqlite3.connect(_read_only(path), uri=True)
    try:
        collections = {}
        for (name,) in db.execute("SELECT name FROM collections ORDER BY name"):
            items = db.execute("SELECT COUNT(*) FROM items WHERE collection = ?", (name,)).fetchone()[0]
            segments = db.execute("SELECT COUNT(*) FROM segments WHERE collection = ?", (name,)).fetchone()[0]
            last = db.execute("SELECT MAX(seq) FROM writes WHERE collection = ?", (name,)).fetchone()[0]
            collections[name] = {"items": items, "segments": segments, "last_seq": int(last or 0)}
        paths = [row[0] for row in db.execute("SELECT media_path FROM items WHERE media_path IS NOT NULL ORDER BY media_path")]
        version = db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
    finally:
        db.close()
    return {"collections": collections, "media_paths": paths, "schema_version": int(version or 0)}


def _copy_snapshot(source: Path, target: Path, upto_seq: int) -> dict[str, Any] | None:
    """Copy an index snapshot if it holds nothing newer than the catalog copy; None when it does (or is absent).

    The service replaces a snapshot by rename, so the open handle reads one whole version.
    """
    try:
        handle = open(source, "rb")
    except FileNotFoundError:
        return None
    with handle:
        head = handle.read(_HEADER.size)
        try:
            magic, _, _, _, last_seq, _ = _HEADER.unpack(head)
        except struct.error:
            return None
        if magic != MAGIC or last_seq > upto_seq:
            return None
        handle.seek(0)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as out:
            shutil.copyfileobj(handle, out, 1 << 20)
    return _describe(target)


# --- restore --------------------------------------------------------------------------------

def restore(src: Path, data_dir: Path) -> dict[str, Any]:
    """Check the backup ``src`` and make it the new data directory ``data_dir`` (absent or empty)."""
    src, data_dir = Path(src), Path(data_dir)
    manifest = read_manifest(src)
    if data_dir.exists() and (not data_dir.is_dir() or any(data_dir.iterdir())):
        raise BackupError(f"{data_dir} is not empty; restore into a new data directory (nothing was changed)")
    verify(src, manifest)
    started = time.monotonic()
    staging = _staging(data_dir, "restoring")
    try:
        for relative in manifest["files"]:
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / relative, target)
        _fsync_tree(staging)
        _land(staging, data_dir, last=CATALOG)  # without its catalog a data directory is plainly unfinished
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return _summary(manifest, data_dir, time.monotonic() - started)


def read_manifest(src: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((Path(src) / MANIFEST).read_text())
    except FileNotFoundError as exc:
        raise BackupError(f"{src}: no {MANIFEST}; not a finished `recall backup`") from exc
    except ValueError as exc:
        raise BackupError(f"{src}/{MANIFEST}: unreadable ({exc})") from exc
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: backup format {manifest.get('format')!r}, this version reads {FORMAT}")
    return manifest


def verify(src: Path, manifest: dict[str, Any]) -> None:
    """Every file present with its size and sha256, the catalog intact and holding the counts the manifest says."""
    for relative, want in manifest["files"].items():
        path = Path(src) / relative
        if not path.is_file():
            raise BackupError(f"{path}: missing from the backup")
        have = _describe(path)
        if have != want:
            raise BackupError(f"{path}: {have['bytes']} bytes, sha256 {have['sha256'][:12]}…; the manifest says "
                              f"{want['bytes']} bytes, {want['sha256'][:12]}… (damaged backup)")
    db = sqlite3.connect(_read_only(Path(src) / CATALOG), uri=True)
    try:
        problems = [row[0] for row in db.execute("PRAGMA integrity_check")]
    finally:
        db.close()
    if problems != ["ok"]:
        raise BackupError(f"{src}/{CATALOG}: integrity check failed: {problems[:3]}")
    state = _catalog_state(Path(src) / CATALOG)
    if state["collections"] != manifest["collections"]:
        raise BackupError(f"{src}: the catalog's collections do not match the manifest")


# --- files ----------------------------------------------------------------------------------

def _staging(target: Path, label: str) -> Path:
    """Where a result is built before it lands at ``target``: beside it, or inside it when it already exists
    (an empty volume's mount point cannot be replaced by a rename, and a sibling may be another filesystem)."""
    tag = f"{label}-{uuid.uuid4().hex[:8]}"
    staging = target / f".{tag}" if target.exists() else target.with_name(f".{target.name}.{tag}")
    staging.mkdir(parents=True)
    return staging


def _land(staging: Path, target: Path, last: str) -> None:
    """Move the finished result into place: one rename, or (staged inside ``target``) one per entry with
    ``last`` moved last, so that an interrupted move is recognisably unfinished."""
    if staging.parent != target:
        os.replace(staging, target)
        fsync_directory(target.parent)
        return
    for entry in sorted(staging.iterdir(), key=lambda p: p.name == last):
        os.replace(entry, target / entry.name)
    staging.rmdir()
    fsync_directory(target)


def _read_only(path: Path) -> str:
    """A URI opening a backup's catalog (one file, no WAL) without ever writing to it."""
    return f"{path.resolve().as_uri()}?mode=ro"


def _copy(source: Path, target: Path) -> dict[str, Any]:
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return _describe(target)


def _describe(path: Path) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}


def _write_durably(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _fsync_tree(root: Path) -> None:
    for directory, _, names in os.walk(root):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(directory))



def _summary(manifest: dict[str, Any], where: Path, seconds: float) -> dict[str, Any]:
    media = [f for name, f in manifest["files"].items() if name.startswith("media/")]
    return {
        "path": str(where), "collections": manifest["collections"], "media_files": len(media),
        "bytes": sum(f["bytes"] for f in manifest["files"].values()),
        "rebuilt_indices": manifest["rebuilt_indices"], "seconds": round(seconds, 3),
    }
