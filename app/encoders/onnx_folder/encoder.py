"""What the two ONNX families share: their description, output checks, and placeholder codes.

A foreign model has no trained hash head, so its binary codes are fitted per collection after the
fact (PCA + ITQ on the collection's first vectors: :mod:`app.encoders.onnx_folder.itq`, applied by
the use cases). ``encode`` still returns codes of the right width, the signs of the first ``bits``
dimensions, so the worker's shape checks hold; a collection of such an encoder never stores them.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from app.encoders.base import Embeddings, Encoder, l2_normalise, sign_codes
from app.encoders.onnx_folder.manifest import Manifest

log = logging.getLogger(__name__)


class OnnxEncoder(Encoder):
    posthoc_codes = True  # the use cases replace the codes with the collection's fitted ones

    def __init__(self, manifest: Manifest, threads: int) -> None:
        super().__init__()
        self.manifest = manifest
        self.threads = threads
        self.name = manifest.name
        self.dim = manifest.dim
        self.bits = manifest.bits
        self.description = manifest.description or f"{manifest.family} model from {manifest.source}"
        self.batch_size = 32

    def to(self, device: str) -> "OnnxEncoder":
        if device != self.device:
            self.device = device
            self.open_sessions()
            if device.startswith("cuda") and not all("CUDAExecutionProvider" in s.get_providers() for s in self.sessions()):
                # the locked onnxruntime is the CPU build: say so, and describe the device the model really uses
                log.warning("encoder %s runs on CPU: this onnxruntime has no CUDA provider (install onnxruntime-gpu)", self.name)
                self.device = "cpu"
        return self

    def sessions(self) -> list[Any]:
        """The onnxruntime sessions of this encoder (one per model file)."""
        return [s for s in (getattr(self, n, None) for n in ("session", "image_session", "text_session")) if s is not None]

    def open_sessions(self) -> None:
        """(Re)create the onnxruntime sessions for ``self.device``."""
        raise NotImplementedError

    def finish(self, raw: np.ndarray, n: int, model: str) -> Embeddings:
        """The model's raw output as unit-length float32 rows, refused if its shape or values are wrong."""
        raw = np.asarray(raw)
        if raw.shape != (n, self.dim):
            raise ValueError(f"{self.manifest.folder / model} returned shape {raw.shape}, expected ({n}, {self.dim})")
        if not np.all(np.isfinite(raw)):
            raise ValueError(f"{self.manifest.folder / model} returned NaN or infinite values")
        floats = l2_normalise(raw.astype(np.float32))
        return Embeddings(floats=floats, codes=self.placeholder_codes(floats))

    def placeholder_codes(self, floats: np.ndarray) -> np.ndarray:
        return sign_codes(floats[:, : self.bits])

    def describe(self) -> dict[str, Any]:
        m = self.manifest
        described = {**super().describe(), "family": m.family, "licence": m.licence, "source": m.source,
                     "folder": str(m.folder), "binary_codes": "pca-itq fitted per collection"}
        if m.custom_ops is not None:
            described["custom_ops"] = {"library": m.custom_ops.library, "domains": list(m.custom_ops.domains)}
        return described


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[start:start + size] for start in range(0, len(items), size)] if items else []
