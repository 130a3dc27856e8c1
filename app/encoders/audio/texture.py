"""``texture-mlp`` family: sound-texture statistics -> whitening + metric head -> rotation.

Why this model for general sounds: with 17 ESC-50 training classes of ~8 clips, the sequence
models of the papers learn their training classes and fall below hand-made statistics on unseen
classes (reports/audio/README.md). Here the statistics are fixed (app/features/texture.py) and
two small learned maps sit on top, each kept cheap so it cannot memorise the classes:

- a PCA whitening learned from the training windows (no labels): decorrelates the statistics and
  evens out their scales, regularised by ``eps`` so noise directions are not blown up;
- an MLP head trained with a normalised-softmax (proxy) loss on the training classes.

The two L2-normalised outputs are concatenated and turned by a fixed random orthogonal matrix:
cosine similarity is unchanged, and the signs of rotated coordinates are a far better Hamming
code than the signs of whitened coordinates, whose variance sits in the leading few.

With ``head_dim = 0`` there is no head: the model is the whitening alone, fitted without labels.
That is what a recipe without any labelled sounds can honestly learn (a head trained on other
labels, such as spoken words, pulls unseen sound classes down: reports/audio/README.md).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from app.encoders.audio._trained_audio import TrainedAudioEncoder, load_trained

FAMILY = "texture-mlp"


class TextureNet(nn.Module):
    """(B, 1, n_in) statistics -> (B, bits) embedding; ``embed`` gives (floats, code values)."""

    def __init__(self, n_in: int, whiten_dim: int = 128, hidden: int = 256, head_dim: int = 128, bits: int = 256,
                 dropout: float = 0.2, input_dropout: float = 0.1) -> None:
        super().__init__()
        if whiten_dim > n_in:
            raise ValueError(f"whiten_dim {whiten_dim} exceeds the {n_in} statistics")
        if bits != whiten_dim + head_dim:
            raise ValueError(f"bits ({bits}) must equal whiten_dim + head_dim ({whiten_dim + head_dim}): "
                             "the rotation is square so cosine similarity is kept")
        self.n_in, self.dim, self.head_dim = n_in, bits, head_dim
        # learned from data by the trainer (app/training/audio/texture_fit.py), saved with the weights
        self.register_buffer("whiten_mean", torch.zeros(n_in))
        self.register_buffer("whiten", torch.zeros(n_in, whiten_dim))
        self.register_buffer("head_mean", torch.zeros(n_in))
        self.register_buffer("head_scale", torch.ones(n_in))
        self.register_buffer("rotation", torch.eye(bits))
        self.head = nn.Sequential(
            nn.Dropout(input_dropout), nn.Linear(n_in, hidden), nn.ReLU(), nn.Dropout(dropout), nn.Linear(hidden, head_dim)
        ) if head_dim else nn.Sequential()

    def head_input(self, stats: torch.Tensor) -> torch.Tensor:
        """Per-feature standardised statistics, the MLP's input."""
        return (stats - self.head_mean) / self.head_scale

    def whitened(self, stats: torch.Tensor) -> torch.Tensor:
        return (stats - self.whiten_mean) @ self.whiten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        stats = x[:, 0]
        whitened = nn.functional.normalize(self.whitened(stats), dim=1)
        if self.head_dim == 0:
            return whitened @ self.rotation
        head = nn.functional.normalize(self.head(self.head_input(stats)), dim=1)
        return (torch.cat([whitened, head], 1) / math.sqrt(2.0)) @ self.rotation

    def embed(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self(x)
        return out, out


def build_net(arch: dict[str, Any]) -> TextureNet:
    """The network a config's ``arch`` describes (``n_in``, ``whiten_dim``, ``hidden``, ``head_dim``, ``bits``...)."""
    return TextureNet(**arch)


def load(directory: Path, config: dict[str, Any]) -> TrainedAudioEncoder:
    """Registry entry point: the encoder stored in ``directory``."""
    return load_trained(Path(directory), config, FAMILY, build_net)
