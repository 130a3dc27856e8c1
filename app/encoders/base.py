"""The encoder interface every model family implements.

An encoder turns a batch of inputs (audio windows, images, or texts) into two aligned outputs:
a float embedding (L2-normalised rows, ``dim`` wide) and a packed binary code (``bits`` bits,
``bits // 8`` bytes per row, in FAISS bit order). The service never pads or truncates vectors:
a wrong-size output is a bug and is refused by :func:`check_embeddings`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal, Sequence

import numpy as np

Modality = Literal["audio", "image"]


@dataclass(frozen=True)
class Embeddings:
    """Float embeddings and binary codes for one batch, row-aligned."""

    floats: np.ndarray  # (n, dim) float32, rows of unit length
    codes: np.ndarray  # (n, bits // 8) uint8, FAISS bit order (see pack_bits)

    def __len__(self) -> int:
        return int(self.floats.shape[0])


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """Pack a (n, B) boolean/0-1 array into (n, B/8) uint8 in FAISS bit order.

    FAISS IndexBinary reads bit ``j`` of a vector from byte ``j // 8`` at position ``j % 8``
    counting from the least significant bit, which is numpy's ``bitorder="little"``.
    """
    bits = np.asarray(bits)
    if bits.ndim != 2 or bits.shape[1] % 8:
        raise ValueError(f"bits must be (n, multiple of 8), got {bits.shape}")
    return np.packbits(bits.astype(bool), axis=1, bitorder="little")


def sign_codes(values: np.ndarray) -> np.ndarray:
    """Binary code of real values: bit = 1 where value > 0 (the paper's sign(), 0 maps to -1)."""
    return pack_bits(np.asarray(values) > 0)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length.

    An all-zero row (digital silence, a blank image) has no direction; it becomes the uniform
    unit vector so that it is still a valid cosine-index entry instead of NaN or zero.
    """
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    out = x / np.maximum(norms, 1e-12)
    zero = norms[:, 0] < 1e-12
    if zero.any():
        out[zero] = 1.0 / np.sqrt(x.shape[1])
    return out.astype(np.float32)


def check_embeddings(emb: Embeddings, *, n: int, dim: int, bits: int) -> Embeddings:
    """Refuse outputs of the wrong shape or dtype rather than silently padding them."""
    if emb.floats.shape != (n, dim) or emb.floats.dtype != np.float32:
        raise ValueError(f"float embeddings must be ({n}, {dim}) float32, got {emb.floats.shape} {emb.floats.dtype}")
    if emb.codes.shape != (n, bits // 8) or emb.codes.dtype != np.uint8:
        raise ValueError(f"codes must be ({n}, {bits // 8}) uint8, got {emb.codes.shape} {emb.codes.dtype}")
    if not np.all(np.isfinite(emb.floats)):
        raise ValueError("float embeddings contain NaN or inf")
    return emb


class Encoder(ABC):
    """A loaded model that embeds one modality (and optionally text into the same space).

    Subclasses set the class attributes in ``__init__`` and implement :meth:`encode`.
    Audio encoders take mono float32 waveforms at ``sample_rate``, one per window; an input
    shorter than the window is zero-padded by the encoder. Image encoders take HxWx3 uint8 RGB
    arrays of any size.
    """

    name: str
    modality: Modality
    dim: int
    bits: int
    sample_rate: int | None = None  # audio only
    default_window_s: float | None = None  # audio only: the window the model was trained on
    default_hop_s: float | None = None
    supports_text: bool = False  # image encoders that can embed a sentence into the image space
    supports_rerank: bool = False  # has a relevance head for stage-2 re-ranking
    description: str = ""
    version: str = "builtin"  # set by the registry: the checkpoint version collections record

    def __init__(self) -> None:
        self.device = "cpu"

    @abstractmethod
    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        """Embed a batch of inputs of this encoder's modality."""

    def encode_text(self, texts: Sequence[str]) -> Embeddings:
        """Embed sentences into the image space (text-to-image encoders only)."""
        raise NotImplementedError(f"encoder {self.name!r} cannot embed text")

    def rerank(self, text: str, image_floats: np.ndarray) -> np.ndarray:
        """Relevance of each image embedding to ``text`` (higher is better); stage-2 re-ranking."""
        raise NotImplementedError(f"encoder {self.name!r} has no relevance head")

    def to(self, device: str) -> "Encoder":
        """Move model weights to ``device`` ("cpu" or "cuda"); the baseline has none to move."""
        self.device = device
        return self

    def describe(self) -> dict[str, Any]:
        """Public description used by GET /v1/encoders."""
        return {
            "name": self.name,
            "modality": self.modality,
            "dim": self.dim,
            "bits": self.bits,
            "sample_rate": self.sample_rate,
            "default_window_s": self.default_window_s,
            "default_hop_s": self.default_hop_s,
            "supports_text": self.supports_text,
            "supports_rerank": self.supports_rerank,
            "description": self.description,
            "version": self.version,
            "device": self.device,
        }
