"""One loader and one writer for checkpoint directories.

A checkpoint is a directory with ``weights.safetensors``, ``config.json`` (family, architecture,
feature parameters, dims, bits) and optionally ``metrics.json``. The family module rebuilds its
model from the config; :func:`load_state_strict` refuses weights that do not fit that model, so a
checkpoint from another version of the code fails loudly instead of producing garbage embeddings.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

FORMAT_VERSION = 1
WEIGHTS = "weights.safetensors"
CONFIG = "config.json"
METRICS = "metrics.json"


class CheckpointError(ValueError):
    """The checkpoint directory is missing, malformed, or does not match the code."""


def save_checkpoint(
    directory: str | Path,
    state_dict: dict[str, torch.Tensor],
    config: dict[str, Any],
    metrics: dict[str, Any] | None = None,
) -> Path:
    """Write weights, config and metrics; each file is written to a temp name and renamed."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if "family" not in config:
        raise CheckpointError("config needs a 'family' naming the model family that loads it")
    config = {"format_version": FORMAT_VERSION, **config}
    tensors = {k: v.detach().cpu().contiguous() for k, v in state_dict.items()}
    tmp = directory / (WEIGHTS + ".tmp")
    save_file(tensors, str(tmp))
    os.replace(tmp, directory / WEIGHTS)
    _write_json(directory / CONFIG, config)
    if metrics is not None:
        _write_json(directory / METRICS, metrics)
    return directory


def read_config(directory: str | Path) -> dict[str, Any]:
    """The config of a checkpoint directory, with its format version checked."""
    path = Path(directory) / CONFIG
    if not path.is_file():
        raise CheckpointError(f"{directory}: no {CONFIG}; is this a checkpoint directory?")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: not valid JSON ({exc})") from exc
    if config.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path}: format_version {config.get('format_version')!r}, this code reads {FORMAT_VERSION}"
        )
    if "family" not in config:
        raise CheckpointError(f"{path}: no 'family' field")
    return config


def load_checkpoint(directory: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Weights (on CPU) and config of a checkpoint directory."""
    config = read_config(directory)
    weights = Path(directory) / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"{directory}: no {WEIGHTS}")
    return load_file(str(weights), device="cpu"), config


def load_state_strict(model: torch.nn.Module, state_dict: dict[str, torch.Tensor], where: str) -> None:
    """Load weights that must match the model exactly: names and shapes."""
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    wrong = sorted(k for k in set(own) & set(state_dict) if own[k].shape != state_dict[k].shape)
    if missing or unexpected or wrong:
        raise CheckpointError(
            f"{where}: weights do not match the model built from its config "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]}, wrong shape {wrong[:5]}); "
            "was it trained with another version of the code?"
        )
    model.load_state_dict(state_dict, strict=True)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
