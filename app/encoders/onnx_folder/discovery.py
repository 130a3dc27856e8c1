"""Registry entries for the encoder folders under a root (``RECALL_ENCODERS__ONNX_DIR``).

Discovery reads manifests only, so a start with many folders stays fast; checksums, onnxruntime and
the probe run when an encoder is first loaded (at start for those collections use, else at the
collection creation that names it). A folder that cannot even be listed (no readable manifest) is
still registered, under its folder name: naming it answers its problem as a 422, the service starts
and its other encoders work.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from app.encoders.onnx_folder.manifest import MANIFEST, FolderError, read_manifest

log = logging.getLogger(__name__)


def is_encoder_folder(directory: Path) -> bool:
    return (directory / MANIFEST).is_file()


def folder_entry(directory: Path, load_checkpoint: Callable[[Path], Any] | None = None) -> dict[str, Any]:
    """name, modality, version, factory and listing info of one folder; never raises for a bad folder.
    ``load_checkpoint``: the registry's loader for the ``checkpoint`` family."""
    from app.encoders.onnx_folder.check import load_folder

    def factory() -> Any:
        import torch

        # the device comes after (create_encoder calls .to), with the service's configured thread count
        return load_folder(directory, "cpu", torch.get_num_threads(), load_checkpoint)

    try:
        manifest = read_manifest(directory)
    except FolderError as exc:
        log.warning("%s", exc.message)
        problem = exc

        def broken() -> Any:
            raise problem

        return {"name": directory.name, "modality": "unknown", "version": "invalid", "factory": broken,
                "info": {"problem": exc.message, "licence": None, "family": None}}
    version = manifest.version or manifest.digest()
    if "@" in directory.name and directory.name != f"{manifest.name}@{version}":
        # a renamed folder would answer for the wrong version
        problem = FolderError(directory, "folder_name", f"holds {manifest.name}@{version}; name the folder {manifest.name}@{version}")
        message = problem.message
        log.warning("%s", message)

        def misnamed() -> Any:
            raise problem

        return {"name": directory.name, "modality": manifest.modality, "version": "invalid", "factory": misnamed,
                "info": {"problem": message, "licence": manifest.licence, "family": manifest.family}}
    return {"name": manifest.name, "modality": manifest.modality, "version": version, "factory": factory,
            "info": {"licence": manifest.licence, "source": manifest.source, "family": manifest.family,
                     "description": manifest.description,
                     "dim": manifest.dim, **({} if manifest.family == "checkpoint" else {"bits": manifest.bits}),
                     # native code the service loads for this folder (app/encoders/onnx_folder/custom_ops.py)
                     **({} if manifest.custom_ops is None else {"custom_ops": {
                         "library": manifest.custom_ops.library, "domains": list(manifest.custom_ops.domains)}})}}


def entries(root: Path, *, include_unlisted: bool = False,
            load_checkpoint: Callable[[Path], Any] | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """Every encoder folder directly under ``root`` (or ``root`` itself when it is one), sorted by name.

    ``include_unlisted``: also the folders with no manifest (and no trained checkpoint's
    ``config.json``): under the configured ONNX root such a folder is meant as an encoder, so it is
    listed as broken with the reason instead of being silently skipped.
    """
    if not root.is_dir():
        return []
    if is_encoder_folder(root):
        return [(root, folder_entry(root, load_checkpoint))]
    found = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if is_encoder_folder(directory) or (include_unlisted and not (directory / "config.json").is_file()):
            found.append((directory, folder_entry(directory, load_checkpoint)))
    return found

