"""The catalog's record types, shared by every backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.index.kinds import IndexSpec


@dataclass(frozen=True)
class Collection:
    """A collection's definition as stored."""

    name: str
    modality: str
    encoder: str
    index_kinds: tuple[str, ...]
    dim: int
    bits: int
    window_s: float | None
    hop_s: float | None
    keep_media: bool
    description: str
    created_at: float
    # the checkpoint version that embedded this collection (None: created before versions were recorded)
    encoder_version: str | None = None
    # which index answers binary searches (flat, ivf, or auto past a size); see app/index/kinds.py
    index_spec: IndexSpec = field(default_factory=IndexSpec)

    @property
    def encoder_key(self) -> str:
        """The registry key of the exact checkpoint this collection's codes came from.

        Every encode for the collection goes through this key, so a collection keeps answering
        with the checkpoint that built it after the default checkpoint of that name changes, and
        codes of two checkpoints never meet in one index.
        """
        return versioned_name(self.encoder, self.encoder_version) if self.encoder_version else self.encoder


def versioned_name(encoder: str, version: str) -> str:
    return f"{encoder}@{version}"


@dataclass
class NewItem:
    """An item ready to commit: decoded, windowed and encoded."""

    id: str
    filename: str | None
    media_type: str | None
    media_path: str | None
    metadata: dict[str, Any]
    times: np.ndarray  # (n, 2) start/end seconds per segment (zeros for images)
    floats: np.ndarray  # (n, dim) float32
    codes: np.ndarray  # (n, bits // 8) uint8
    duration_s: float | None = None
    width: int | None = None
    height: int | None = None


@dataclass
class WriteResult:
    """What a committed write changed, for applying it to the indices."""

    seq: int
    removed_segment_ids: list[int] = field(default_factory=list)
    added_segment_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    added_floats: np.ndarray | None = None
    added_codes: np.ndarray | None = None
    replaced_media: list[str] = field(default_factory=list)
