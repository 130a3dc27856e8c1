"""Which encoders exist and how to build them.

Two sources: training-free baselines (always available) and checkpoint directories. A
checkpoint directory's ``config.json`` names its ``family``; the family's module exposes
``load(directory, config) -> Encoder``. Default checkpoints live in ``app/assets/models``;
``RECALL_ENCODERS__EXTRA_DIRS`` adds directories of user-trained ones. A third source: folders
with a ``manifest.json`` hold foreign ONNX models (``RECALL_ENCODERS__ONNX_DIR``,
:mod:`app.encoders.onnx_folder`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from app.encoders.base import Encoder
from app.encoders.checkpoint import CheckpointError, read_config
from app.storage.records import versioned_name

ASSETS = Path(__file__).resolve().parent.parent / "assets" / "models"

# family name -> "module:function" that loads a checkpoint of that family
FAMILIES: dict[str, str] = {
    "siamese-mlp": "app.encoders.audio.siamese:load",
    "attn-hash": "app.encoders.audio.attn_hash:load",
    "texture-mlp": "app.encoders.audio.texture:load",
    "image-text": "app.encoders.image_text.image_text:load",
    "routed-fusion": "app.encoders.audio.routed_fusion:load",
}


@dataclass(frozen=True)
class EncoderSpec:
    """Where an encoder comes from, before it is built."""

    name: str
    modality: str
    factory: Callable[[], Encoder]
    source: str
    version: str = "builtin"  # a checkpoint's config "version", else a digest of its weights
    info: dict | None = None  # what GET /v1/encoders shows before loading (an ONNX folder's licence, or its problem)


def checkpoint_version(directory: Path, config: dict) -> str:
    """The version a collection records: the config's ``version`` or the first 12 hex digits of the weights' SHA-256.

    A digest by default means a checkpoint retrained in place is a new version even if nobody
    bumped a number, so its codes are never mixed with the old ones.
    """
    if config.get("version") is not None:
        return str(config["version"])
    import hashlib

    digest = hashlib.sha256()
    with (directory / "weights.safetensors").open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


class UnknownEncoder(KeyError):
    """Raised for a name that is not registered; the message lists the available names."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


def _baselines() -> list[EncoderSpec]:
    from app.encoders import baseline

    return [
        EncoderSpec("audio-baseline", "audio", baseline.AudioBaselineEncoder, "builtin"),
        EncoderSpec("image-baseline", "image", baseline.ImageBaselineEncoder, "builtin"),
    ]


def _checkpoint_spec(directory: Path) -> EncoderSpec:
    config = read_config(directory)
    family = config["family"]
    if family not in FAMILIES:
        raise CheckpointError(f"{directory}: unknown family {family!r}; known: {sorted(FAMILIES)}")
    module_name, func_name = FAMILIES[family].split(":")

    def factory() -> Encoder:
        loader = getattr(importlib.import_module(module_name), func_name)
        return loader(directory, config)

    name = config.get("name", directory.name)
    return EncoderSpec(name, config["modality"], factory, str(directory), checkpoint_version(directory, config))


def load_checkpoint_dir(directory: str | Path) -> Encoder:
    """The encoder stored in one checkpoint directory, whatever its family (used for a fusion's branches)."""
    return _checkpoint_spec(Path(directory)).factory()


def discover(extra_dirs: Iterable[str | Path] = (), onnx_dirs: Iterable[str | Path] = ()) -> dict[str, EncoderSpec]:
    """All encoders: baselines, default checkpoints, then user directories (later ones win).

    Each checkpoint is also listed as ``name@version``, the key a collection built with it uses,
    so a collection keeps its checkpoint while a newer one of the same name is the default. A
    directory itself named ``name@version`` holds such an older checkpoint: it is listed under that
    key only, never as the plain name, which stays the current one. ONNX encoder folders (a
    ``manifest.json``) follow the same rules in any of these roots; under ``onnx_dirs`` a folder
    without a manifest is registered too, as broken, so naming it answers why.
    """
    specs = {key: spec for spec in _baselines() for key in (spec.name, versioned_name(spec.name, spec.version))}
    roots = [ASSETS, *map(Path, extra_dirs)]
    for root in roots:
        if not root.is_dir():
            continue
        _add_onnx_folders(specs, root, strict=False)
        candidates = [root] if (root / "config.json").is_file() else sorted(root.iterdir())
        for directory in candidates:
            # a checkpoint brought with a manifest.json is an encoder folder (its checksums checked): listed above
            if (directory / "config.json").is_file() and not (directory / "manifest.json").is_file():
                spec = _checkpoint_spec(directory)
                key = versioned_name(spec.name, spec.version)
                if is_versioned(directory.name):
                    if directory.name != key:  # a renamed folder would answer for the wrong checkpoint
                        raise ValueError(f"checkpoint folder {directory} holds {key}; name the folder {key}")
                else:
                    specs[spec.name] = spec
                specs[key] = spec
    for root in map(Path, onnx_dirs):
        _add_onnx_folders(specs, root, strict=True)
    return specs


def _add_onnx_folders(specs: dict[str, EncoderSpec], root: Path, *, strict: bool) -> None:
    """The ONNX encoder folders under ``root``; ``strict``: also folders that lack a manifest (as broken)."""
    from app.encoders.onnx_folder.discovery import entries

    for directory, entry in entries(root, include_unlisted=strict, load_checkpoint=load_checkpoint_dir):
        spec = EncoderSpec(entry["name"], entry["modality"], entry["factory"], str(directory), entry["version"], entry["info"])
        if entry["version"] == "invalid":  # answers for its folder's name only, and never shadows a working encoder
            specs.setdefault(directory.name, spec)
            continue
        if not is_versioned(directory.name):
            specs[spec.name] = spec
        specs[versioned_name(spec.name, spec.version)] = spec


def is_versioned(key: str) -> bool:
    return "@" in key


def create_encoder(name: str, specs: dict[str, EncoderSpec], device: str = "cpu") -> Encoder:
    """Build the named encoder on ``device``; unknown names list what is available."""
    if name not in specs:
        raise UnknownEncoder(f"unknown encoder {name!r}; available: {sorted(k for k in specs if not is_versioned(k))}")
    encoder = specs[name].factory().to(device)
    encoder.version = specs[name].version
    return encoder
