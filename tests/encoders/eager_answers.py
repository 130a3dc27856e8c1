"""An encoder's answers from its eager modules instead of its CPU traces, for tests that hold the two equal."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.encoders.traced import CpuTraces


def eager_encode(encoder: Any, *batches: list[np.ndarray]) -> list[Any]:
    """``encoder.encode`` of each batch with the eager modules on CPU (the same encoder; its traces put back after)."""
    steps = encoder.steps
    encoder.steps = CpuTraces(steps.eager, lambda: steps.eager)
    try:
        return [encoder.encode(batch) for batch in batches]
    finally:
        encoder.steps = steps
