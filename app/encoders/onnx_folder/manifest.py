"""The ``manifest.json`` of an encoder folder: its fields, their validation, and the files' checksums.

Every problem is a :class:`FolderError` naming the folder, what is wrong and how to fix it, with a
short ``kind`` (``details.problem`` in the API's error body) that tests and scripts can match. The
manifest is the only thing read before the checksums are verified, and it is plain JSON.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.errors import InvalidInput
from app.features.pretrained import sha256_file

MANIFEST = "manifest.json"
FORMAT = "recall-encoder/1"
# family -> the modality it embeds and the parts (sections) its manifest must have
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "onnx-audio": ("audio", ("audio",)),
    "onnx-clip": ("image", ("image", "text")),
    # a trained checkpoint of a family whose code the project has (config.json + weights.safetensors, the
    # registry's loaders), brought with a manifest for its checksums, licence and source; either modality
    "checkpoint": ("audio|image", ()),
}
CHECKPOINT_FILES = ("config.json", "weights.safetensors")
# weight formats that are pickles (or may hold one): never loaded, whatever the manifest says
PICKLE_SUFFIXES = {".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".bin", ".joblib", ".npy", ".npz"}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class FolderError(InvalidInput):
    """An encoder folder that cannot be used; 422 when a collection names it."""

    def __init__(self, folder: str | Path, kind: str, message: str) -> None:
        super().__init__(f"encoder folder {folder}: {message}", details={"folder": str(folder), "problem": kind})
        self.kind = kind


@dataclass(frozen=True)
class Part:
    """One ONNX model of the folder and how to feed it (a section of the manifest)."""

    model: str  # file name inside the folder
    input_name: str | None  # None: the model's only (first) input
    output_name: str | None  # None: the model's first output
    options: dict[str, Any] = field(default_factory=dict)  # the section's other fields


@dataclass(frozen=True)
class CustomOps:
    """The custom-op library a model needs and the operator domains it provides (app/encoders/onnx_folder/custom_ops.py)."""

    library: str  # file name inside the folder, listed in 'files'
    domains: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    folder: Path
    name: str
    family: str
    modality: str
    dim: int
    bits: int  # width of the post-hoc binary codes (PCA + ITQ), a multiple of 8, at most dim
    licence: str
    source: str
    description: str
    version: str | None  # None: the first 12 hex digits of the files' combined sha256
    files: dict[str, str]  # file name -> sha256 hex
    parts: dict[str, Part]  # "audio" | "image" | "text" -> its model
    custom_ops: CustomOps | None = None  # None: no custom-op library is ever loaded

    def digest(self) -> str:
        """A version for a manifest that names none: changes whenever any file's checksum does."""
        joined = "".join(f"{name}:{sha}\n" for name, sha in sorted(self.files.items()))
        return hashlib.sha256(joined.encode()).hexdigest()[:12]


def read_manifest(folder: str | Path) -> Manifest:
    """The folder's manifest, every field checked; no model file is opened (checksums: :func:`verify_files`)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise FolderError(folder, "not_a_folder", "no such folder")
    if not path.is_file():
        raise FolderError(folder, "no_manifest", f"no {MANIFEST}; an encoder folder needs one (see README, 'Bring your own encoder')")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FolderError(folder, "manifest_json", f"{MANIFEST} is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise FolderError(folder, "manifest_field", f"{MANIFEST} must hold a JSON object")
    get = _Fields(folder, raw)
    if raw.get("format") != FORMAT:
        raise FolderError(folder, "manifest_format", f"'format' is {raw.get('format')!r}; this service reads {FORMAT!r}")
    family = get.str("family")
    if family not in FAMILIES:
        raise FolderError(folder, "unknown_family", f"family {family!r} is not one this service runs; known: {sorted(FAMILIES)}")
    modality, sections = FAMILIES[family]
    if get.str("modality") not in modality.split("|"):
        raise FolderError(folder, "manifest_field", f"family {family!r} embeds {modality}, but 'modality' is {raw['modality']!r}")
    modality = raw["modality"]
    name = get.str("name", default=folder.name.split("@", 1)[0])
    if not NAME_PATTERN.fullmatch(name) or "@" in name:
        raise FolderError(folder, "manifest_field", f"'name' {name!r}: use 1-64 letters, digits, '_', '-' or '.'")
    dim = get.int("dim", low=1, high=65536)
    bits = get.int("bits", low=8, high=dim, default=min(dim, 256) // 8 * 8)
    if bits % 8:
        raise FolderError(folder, "manifest_field", f"'bits' ({bits}) must be a multiple of 8")
    files = raw.get("files")
    if not isinstance(files, dict) or not files:
        raise FolderError(folder, "manifest_field", "'files' must map every file of the folder to its sha256")
    for file_name, sha in files.items():
        _check_file_name(folder, file_name)
        if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise FolderError(folder, "manifest_field", f"'files'[{file_name!r}] must be a sha256 of 64 lowercase hex digits")
    parts = {section: _part(folder, raw, section, files) for section in sections}
    missing = [name for name in CHECKPOINT_FILES if family == "checkpoint" and name not in files]
    if missing:
        raise FolderError(folder, "unlisted_file", f"a checkpoint folder's 'files' must give the sha256 of {missing}")
    version = raw.get("version")
    if version is not None and (not isinstance(version, (str, int)) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,40}", str(version))):
        raise FolderError(folder, "manifest_field", "'version' must be 1-40 letters, digits, '_', '-' or '.'")
    return Manifest(
        folder=folder, name=name, family=family, modality=modality, dim=dim, bits=bits,
        licence=get.str("licence"), source=get.str("source"), description=get.str("description", default=""),
        version=None if version is None else str(version), files=dict(files), parts=parts,
        custom_ops=_custom_ops(folder, raw, files),
    )


def verify_files(manifest: Manifest) -> None:
    """Every file the manifest lists exists inside the folder and has its sha256."""
    for file_name, expected in sorted(manifest.files.items()):
        path = manifest.folder / file_name
        if not path.is_file():
            raise FolderError(manifest.folder, "missing_file", f"{file_name} is listed in {MANIFEST} but missing")
        actual = sha256_file(path)
        if actual != expected:
            raise FolderError(manifest.folder, "checksum",
                              f"{file_name} has sha256 {actual}, the manifest says {expected}: the file changed or is "
                              "incomplete; copy it again (or update the manifest if you replaced it on purpose)")




def _part(folder: Path, raw: dict[str, Any], section: str, files: dict[str, Any]) -> Part:
    spec = raw.get(section)
    if not isinstance(spec, dict):
        raise FolderError(folder, "manifest_field", f"family {raw['family']!r} needs an object '{section}' (its model and inputs)")
    get = _Fields(folder, spec, prefix=f"{section}.")
    model = get.str("model")
    _check_file_name(folder, model)
    if Path(model).suffix.lower() in PICKLE_SUFFIXES:
        raise FolderError(folder, "pickle", f"'{section}.model' is {model}: pickled weights are never loaded; export the model to ONNX")
    if Path(model).suffix.lower() != ".onnx":
        raise FolderError(folder, "manifest_field", f"'{section}.model' must be an .onnx file, got {model}")
    for key in ("model", "tokenizer"):
        if key in spec and spec[key] not in files:
            raise FolderError(folder, "unlisted_file", f"'{section}.{key}' names {spec[key]}, which 'files' gives no sha256 for")
    options = {k: v for k, v in spec.items() if k not in ("model", "input_name", "output_name")}
    return Part(model=model, input_name=get.str("input_name", default=None), output_name=get.str("output_name", default=None),
                options=options)


def _custom_ops(folder: Path, raw: dict[str, Any], files: dict[str, Any]) -> CustomOps | None:
    spec = raw.get("custom_ops")
    if spec is None:
        return None
    if not isinstance(spec, dict) or set(spec) != {"library", "domains"}:
        raise FolderError(folder, "manifest_field", "'custom_ops' must be an object with 'library' (a file) and 'domains' (a list)")
    library, domains = spec["library"], spec["domains"]
    _check_file_name(folder, library)
    if Path(library).suffix.lower() not in (".so", ".dylib", ".dll"):
        raise FolderError(folder, "manifest_field", f"'custom_ops.library' must be a shared library (.so, .dylib, .dll), got {library}")
    if library not in files:
        raise FolderError(folder, "unlisted_file", f"'custom_ops.library' names {library}, which 'files' gives no sha256 for")
    if not isinstance(domains, list) or not domains or not all(isinstance(d, str) and NAME_PATTERN.fullmatch(d) for d in domains):
        raise FolderError(folder, "manifest_field", "'custom_ops.domains' must list the operator domains the library provides")
    return CustomOps(library=library, domains=tuple(domains))


def _check_file_name(folder: Path, name: Any) -> None:
    """A plain file name in the folder: no directories, no way out of it."""
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise FolderError(folder, "manifest_field", f"file name {name!r}: give a plain file name inside the folder")


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON")


class _Fields:
    """Typed reads of one JSON object, each failure naming the field."""

    def __init__(self, folder: Path, raw: dict[str, Any], prefix: str = "") -> None:
        self.folder, self.raw, self.prefix = folder, raw, prefix

    _MISSING = object()

    def _get(self, key: str, default: Any) -> Any:
        if key in self.raw:
            return self.raw[key]
        if default is self._MISSING:
            raise FolderError(self.folder, "manifest_field", f"{MANIFEST} has no '{self.prefix}{key}'")
        return default

    def str(self, key: str, default: Any = _MISSING) -> Any:
        value = self._get(key, default)
        if value is not default and not isinstance(value, str):
            raise FolderError(self.folder, "manifest_field", f"'{self.prefix}{key}' must be a string")
        return value

    def int(self, key: str, low: int, high: int, default: Any = _MISSING) -> int:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise FolderError(self.folder, "manifest_field", f"'{self.prefix}{key}' must be an integer in [{low}, {high}]")
        return value

    def number(self, key: str, low: float, high: float, default: Any = _MISSING) -> float:
        value = self._get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
            raise FolderError(self.folder, "manifest_field", f"'{self.prefix}{key}' must be a number in [{low}, {high}]")
        return float(value)


def fields(folder: Path, section: dict[str, Any], prefix: str) -> _Fields:
    """Typed reads of a section's family-specific options (sample rate, image size, ...)."""
    return _Fields(folder, section, prefix)
