"""Argument checks shared by the indices.

Wrong sizes and dtypes are always errors: a vector that is silently padded, truncated or
cast ends up as a wrong search result that nobody can trace back.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def as_ids(ids: Any) -> np.ndarray:
    """Return ids as a contiguous 1-D int64 array.

    Raises:
        ValueError: not 1-D, not integers, or negative (negative ids are reserved for padding).
    """
    array = np.asarray(ids)
    if array.size == 0:
        return np.empty(0, dtype=np.int64)
    if array.ndim != 1:
        raise ValueError(f"ids must be a 1-D array, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        raise ValueError(f"ids must be integers, got dtype {array.dtype}")
    if array.dtype.kind == "u" and array.max() > np.iinfo(np.int64).max:
        raise ValueError("ids must fit in int64")
    array = np.ascontiguousarray(array, dtype=np.int64)
    if array.min() < 0:
        raise ValueError(f"ids must be >= 0 (negative ids are reserved), got {int(array.min())}")
    return array


def as_rows(vectors: Any, *, width: int, dtype: np.dtype, what: str, unit: str) -> np.ndarray:
    """Return ``vectors`` as a C-contiguous ``(n, width)`` array of exactly ``dtype``.

    Args:
        vectors: the caller's array.
        width: required row width (elements).
        dtype: required element type; no casting is done.
        what: name used in messages ("codes", "queries", ...).
        unit: what one element is ("bytes", "dimensions"), for messages.

    Raises:
        ValueError: wrong type, dtype, rank or width.
    """
    if not isinstance(vectors, np.ndarray):
        raise ValueError(f"{what} must be a numpy array, got {type(vectors).__name__}")
    if vectors.dtype != dtype:
        raise ValueError(f"{what} must have dtype {dtype}, got {vectors.dtype}")
    if vectors.ndim != 2:
        raise ValueError(f"{what} must be 2-D (n, {width}); got shape {vectors.shape} (use x[None] for one row)")
    if vectors.shape[1] != width:
        raise ValueError(f"{what} must have {width} {unit} per row, got {vectors.shape[1]}")
    return np.ascontiguousarray(vectors)


def as_k(k: Any) -> int:
    """Validate the number of neighbours."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    return int(k)
