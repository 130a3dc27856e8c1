"""Starting a training run from a checkpoint's weights (``--init-from``), refusing a mismatch.

Fine-tuning only makes sense when the checkpoint's network is the one being trained: the same
family, rate, window, bits, frontend and layer sizes. Dropout has no weights, so it may differ.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable

import torch

from app.encoders.audio._trained_audio import build_parts
from app.encoders.checkpoint import CheckpointError, load_checkpoint, load_state_strict

# Architecture and frontend keys that must be equal: they decide what the weights mean. Dropout is
# left out on purpose (no weights; fine-tuning often changes it), and so are the name, hop and
# description (service defaults, not the model).
_INIT_KEYS = ("family", "sample_rate", "window_s", "bits", "features")


def init_mismatches(stored: dict[str, Any], requested: dict[str, Any]) -> list[str]:
    """What differs between a checkpoint's config and a run's, as "key: checkpoint X, requested Y"."""
    found = [f"{k}: checkpoint {stored.get(k)!r}, requested {requested.get(k)!r}" for k in _INIT_KEYS if stored.get(k) != requested.get(k)]
    arch_s, arch_r = stored.get("arch", {}), requested.get("arch", {})
    found += [f"arch.{k}: checkpoint {arch_s.get(k)!r}, requested {arch_r.get(k)!r}"
              for k in sorted(set(arch_s) | set(arch_r)) if k != "dropout" and arch_s.get(k) != arch_r.get(k)]
    return found


def load_init_weights(
    net: torch.nn.Module, requested: dict[str, Any], builders: dict[str, Callable[..., Any]], directory: str
) -> dict[str, Any]:
    """Load a checkpoint's weights (input statistics included) into ``net``.

    Returns:
        What to record about the start: path, name, SHA-256 of the weights, the source command.

    Raises:
        CheckpointError: the checkpoint's family, rate, window, bits, frontend or network
            differ from ``requested``, or its weights do not fit its own config.
    """
    state, stored = load_checkpoint(directory)
    mismatches = init_mismatches(stored, requested)
    if mismatches:
        command = stored.get("training", {}).get("command", "")
        raise CheckpointError(
            f"--init-from {directory}: the checkpoint's architecture or features differ from this run's: "
            + "; ".join(mismatches)
            + (f". Pass the options it was trained with: {command}" if command else "")
        )
    build_parts(stored, stored["family"], builders[stored["family"]])  # its config fits this code
    load_state_strict(net, state, str(directory))
    return {"path": str(directory), "name": stored.get("name"),
            "weights_sha256": hashlib.sha256((Path(directory) / "weights.safetensors").read_bytes()).hexdigest(),
            "command": stored.get("training", {}).get("command", "")}
