"""Training-free encoders: fixed statistics through a seeded random projection.

They make the whole service work before any model is trained and are the baseline every
trained model is compared with in the same run. The projection is seeded, so embeddings are
identical across processes and restarts (indices rebuilt from the catalog stay valid).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from app.encoders.base import Embeddings, Encoder, l2_normalise, sign_codes
from app.features.logmel import LogMel


def _projection(n_in: int, n_out: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)


def _standardise(stats: np.ndarray) -> np.ndarray:
    """Centre and scale each statistics vector on its own.

    Raw log-mel statistics share a large common offset; without centring, a random projection's
    signs would mostly encode that offset and every code would look alike.
    """
    stats = stats - stats.mean(axis=1, keepdims=True)
    return stats / np.maximum(stats.std(axis=1, keepdims=True), 1e-6)


class AudioBaselineEncoder(Encoder):
    """Log-mel mean, std and delta statistics -> random projection; bits are the signs."""

    name = "audio-baseline"
    modality = "audio"
    sample_rate = 16000
    default_window_s = 1.0
    default_hop_s = 0.5
    description = "training-free: log-mel statistics through a fixed random projection (sign for bits)"

    def __init__(self, dim: int = 256, n_mels: int = 40, seed: int = 1234) -> None:
        super().__init__()
        self.dim = dim
        self.bits = dim
        self.features = LogMel(self.sample_rate, n_mels=n_mels)
        self.projection = _projection(3 * n_mels, dim, seed)

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        stats = []
        with torch.inference_mode():
            for wave in inputs:
                # np.require(..., 'W'): a read-only wave (a view of a decoded buffer) is copied, not
                # wrapped: torch warns on tensors over memory it may not write
                mel = self.features(torch.from_numpy(np.require(wave, np.float32, ['W']))[None])[0]
                delta = mel[1:] - mel[:-1] if mel.shape[0] > 1 else torch.zeros_like(mel)
                stats.append(torch.cat([mel.mean(0), mel.std(0, correction=0), delta.abs().mean(0)]).numpy())
        projected = _standardise(np.stack(stats)) @ self.projection
        return Embeddings(floats=l2_normalise(projected), codes=sign_codes(projected))


class ImageBaselineEncoder(Encoder):
    """Colour histograms, a coarse thumbnail and gradient-orientation histograms -> projection."""

    name = "image-baseline"
    modality = "image"
    description = "training-free: colour and texture statistics through a fixed random projection"
    _size = 64  # images are resized to this square before statistics: cheap and size-independent

    def __init__(self, dim: int = 256, seed: int = 4321) -> None:
        super().__init__()
        self.dim = dim
        self.bits = dim
        self.projection = _projection(self._feature_size(), dim, seed)

    @staticmethod
    def _feature_size() -> int:
        return 3 * 16 + 3 * 8 * 8 + 4 * 4 * 8

    def _features(self, image: np.ndarray) -> np.ndarray:
        from PIL import Image

        rgb = np.asarray(Image.fromarray(image).convert("RGB").resize((self._size, self._size)), dtype=np.float32) / 255.0
        colour = np.concatenate([np.histogram(rgb[..., c], bins=16, range=(0, 1))[0] for c in range(3)]) / rgb[..., 0].size
        thumb = rgb.reshape(8, 8, 8, 8, 3).mean(axis=(1, 3)).transpose(2, 0, 1).ravel()
        grey = rgb.mean(axis=2)
        gy, gx = np.gradient(grey)
        magnitude, angle = np.hypot(gx, gy), np.mod(np.arctan2(gy, gx), np.pi)
        orientation = np.minimum((angle / np.pi * 8).astype(int), 7)
        texture = np.zeros((4, 4, 8), np.float32)
        cell = self._size // 4
        for i in range(4):
            for j in range(4):
                block = (slice(i * cell, (i + 1) * cell), slice(j * cell, (j + 1) * cell))
                texture[i, j] = np.bincount(orientation[block].ravel(), magnitude[block].ravel(), minlength=8)
        texture /= max(float(texture.sum()), 1e-6)
        return np.concatenate([colour, thumb, texture.ravel() * 4]).astype(np.float32)

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        projected = _standardise(np.stack([self._features(image) for image in inputs])) @ self.projection
        return Embeddings(floats=l2_normalise(projected), codes=sign_codes(projected))
