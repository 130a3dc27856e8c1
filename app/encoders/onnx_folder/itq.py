"""Binary codes for an encoder without a hash head: PCA to ``bits`` dimensions, then an ITQ rotation.

Iterative quantisation (Gong and Lazebnik, 2011) rotates the PCA projection so that the signs lose
as little as possible of it: it alternates B = sign(V R) and the orthogonal R that best maps V onto
B (an SVD of V^T B). Without the rotation PCA's first components carry most of the variance and
the last ones are sign noise; with it the bits share the variance. Fitted on a collection's first
vectors (its first ingest), kept beside the catalog as a plain ``.npz`` (read with
``allow_pickle=False``), and refitted when ``recall reembed`` builds a new collection.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.encoders.base import pack_bits

ITERATIONS = 50


@dataclass(frozen=True)
class ItqCodes:
    mean: np.ndarray  # (dim,) float32: the fitted vectors' mean, subtracted before projecting
    projection: np.ndarray  # (dim, bits) float32: PCA directions times the ITQ rotation
    fitted_on: int  # how many vectors the fit saw

    @property
    def bits(self) -> int:
        return int(self.projection.shape[1])

    def codes(self, floats: np.ndarray) -> np.ndarray:
        """(n, bits // 8) uint8 codes in FAISS bit order; a bit is 1 where the projection is positive."""
        floats = np.asarray(floats, dtype=np.float32)
        if floats.ndim != 2 or floats.shape[1] != self.mean.shape[0]:
            raise ValueError(f"vectors must be (n, {self.mean.shape[0]}), got {floats.shape}")
        return pack_bits(((floats - self.mean) @ self.projection) > 0)

    def save(self, path: Path) -> None:
        """Written under a temporary name, then linked into place only if nothing is there yet
        (FileExistsError otherwise): a reader never sees half a file, and of two API processes that
        fit one collection at once (cluster mode shares the data directory) the first one wins."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{id(self)}.tmp")
        try:
            with tmp.open("wb") as handle:
                np.savez(handle, mean=self.mean, projection=self.projection, fitted_on=np.int64(self.fitted_on))
                handle.flush()
                os.fsync(handle.fileno())
            os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> "ItqCodes":
        with np.load(path, allow_pickle=False) as data:  # plain arrays only: never unpickles
            return cls(data["mean"].astype(np.float32), data["projection"].astype(np.float32), int(data["fitted_on"]))


def fit_itq(floats: np.ndarray, bits: int, *, seed: int = 0, iterations: int = ITERATIONS) -> ItqCodes:
    """PCA + ITQ fitted on ``floats`` (n, dim); works for any n >= 1 (fewer than ``bits`` vectors
    leave the remaining directions to the SVD's orthonormal completion: still a fixed rotation)."""
    x = np.asarray(floats, dtype=np.float64)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"need at least one vector to fit codes, got shape {x.shape}")
    dim = x.shape[1]
    if not 8 <= bits <= dim or bits % 8:
        raise ValueError(f"bits must be a multiple of 8 in [8, {dim}], got {bits}")
    mean = x.mean(axis=0)
    centred = x - mean
    _, _, vt = np.linalg.svd(centred, full_matrices=True)
    pca = vt[:bits].T  # (dim, bits), orthonormal columns
    v = centred @ pca
    rng = np.random.default_rng(seed)
    rotation, _ = np.linalg.qr(rng.standard_normal((bits, bits)))
    for _ in range(iterations):
        b = np.where(v @ rotation > 0, 1.0, -1.0)
        u, _, wt = np.linalg.svd(v.T @ b)
        rotation = u @ wt
    return ItqCodes(mean.astype(np.float32), (pca @ rotation).astype(np.float32), int(len(x)))
