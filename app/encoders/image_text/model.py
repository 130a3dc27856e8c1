"""The paper's block network in torch: image CNN tower, text FC tower, FC relevance head.

* Block 1, :class:`ImageTower`: a small CNN on 224x224 crops. It strides early (stride 4 in the
  first layer) so one image costs ~60 MFLOPs and CPU ingest stays fast; a 2x2 pooled grid next
  to the global pool keeps coarse position ("on the left", "at the top").
* Block 2, :class:`TextTower`: fully connected layers over a fixed pre-trained sentence vector.
* Block 3, :class:`RelevanceHead`: fully connected layers over both towers' outputs that predict
  graded relevance in [0, 1].

Both towers end in L2-normalised vectors of one size, trained with an in-batch ranking loss so
that stage 1 is a plain inner-product index search. The head only reads the *stored* image
embedding and the text, so stage 2 can re-score index candidates without touching the images.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CROP = 224  # the tower's input side; images are squashed to 256x256 first, as in training
RESIZE = 256
# Per-channel normalisation of [0, 1] pixels; fixed constants so inference needs no statistics.
MEAN = (0.48, 0.46, 0.41)
STD = (0.27, 0.26, 0.28)


def _conv(c_in: int, c_out: int, kernel: int, stride: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class ImageTower(nn.Module):
    """(B, 3, 224, 224) normalised pixels -> (B, dim) unit vectors."""

    def __init__(self, dim: int = 128, width: int = 32) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            _conv(3, w, 7, 4),  # 56x56: stride early, most of the cost of a CNN is at full resolution
            _conv(w, 2 * w, 3, 2),  # 28x28
            _conv(2 * w, 2 * w, 3, 1),
            _conv(2 * w, 4 * w, 3, 2),  # 14x14
            _conv(4 * w, 6 * w, 3, 2),  # 7x7
        )
        channels = 6 * w
        self.project = nn.Sequential(
            nn.Linear(channels * 5, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, dim),
        )
        self.feature_dim = channels * 5

    def pooled(self, pixels: torch.Tensor) -> torch.Tensor:
        """Backbone descriptor before the projection: global mean plus a 2x2 grid of means."""
        maps = self.features(pixels)
        grid = F.adaptive_avg_pool2d(maps, 2).flatten(1)
        return torch.cat([maps.mean(dim=(2, 3)), grid], dim=1)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.project(self.pooled(pixels)), dim=1)


class TextTower(nn.Module):
    """(B, text_dim) pre-trained sentence vectors -> (B, dim) unit vectors."""

    def __init__(self, text_dim: int, dim: int = 128, hidden: int = 256, dropout: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(text_dim, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(hidden, dim),
        )

    def forward(self, text_vectors: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(text_vectors), dim=1)


class RelevanceHead(nn.Module):
    """Relevance in [0, 1] of an image embedding to a text embedding (the paper's block 3).

    relevance = sigmoid(a * cos(image, text) + b + mlp([image, text, image * text])).
    The cosine term is a skip connection: at initialisation the head ranks exactly like stage 1,
    and the MLP learns corrections from the joint representation instead of re-learning the
    similarity from scratch on little data.
    """

    def __init__(self, dim: int = 128, hidden: int = 128) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(3 * dim, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, 1))
        nn.init.zeros_(self.mlp[2].weight)
        nn.init.zeros_(self.mlp[2].bias)
        self.scale = nn.Parameter(torch.tensor(10.0))
        self.bias = nn.Parameter(torch.tensor(-5.0))

    def logits(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Pre-sigmoid scores for row-aligned (B, dim) image and text embeddings."""
        cosine = (image * text).sum(dim=1)
        joint = torch.cat([image, text, image * text], dim=1)
        return self.scale * cosine + self.bias + self.mlp(joint).squeeze(1)

    def forward(self, image: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.logits(image, text))


class ImageTextModel(nn.Module):
    """The three blocks plus the learned temperature of the in-batch ranking loss."""

    def __init__(self, text_dim: int, dim: int = 128, width: int = 32, text_hidden: int = 256,
                 head_hidden: int = 128) -> None:
        super().__init__()
        self.image_tower = ImageTower(dim, width)
        self.text_tower = TextTower(text_dim, dim, text_hidden)
        self.head = RelevanceHead(dim, head_hidden)
        # CLIP's initial temperature 0.07, learned in log space
        self.logit_scale = nn.Parameter(torch.tensor(float(np.log(1 / 0.07))))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ImageTextModel":
        arch = config["architecture"]
        return cls(text_dim=int(arch["text_dim"]), dim=int(arch["dim"]), width=int(arch["width"]),
                   text_hidden=int(arch["text_hidden"]), head_hidden=int(arch["head_hidden"]))


# ---------------------------------------------------------------- losses


def ranking_loss(image: torch.Tensor, text: torch.Tensor, logit_scale: torch.Tensor,
                 labels: torch.Tensor | None = None) -> torch.Tensor:
    """Symmetric in-batch softmax ranking loss (InfoNCE) over row-aligned unit vectors.

    Row i of ``text`` describes row i of ``image``; every other row in the batch is a negative,
    except pairs whose graded label is 1 (a caption that fully fits another image too), which
    are masked out so the loss does not push apart true matches.
    """
    scale = logit_scale.exp().clamp(max=100.0)
    logits = scale * text @ image.T
    if labels is not None:
        eye = torch.eye(len(image), dtype=torch.bool, device=image.device)
        logits = logits.masked_fill((labels >= 1.0) & ~eye, float("-inf"))
    target = torch.arange(len(image), device=image.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def head_loss(head: RelevanceHead, image: torch.Tensor, text: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Class-balanced MSE of the head on every (text i, image j) pair of a batch.

    ``labels[i, j]`` is the graded relevance (1 / 0.66 / 0). The loss averages the squared error
    within each label value first and then across label values, so the n positives of a batch
    weigh as much as its n^2 - n negatives (the paper balances by sampling triples instead).
    """
    n = len(image)
    predicted = head(image.repeat(n, 1), text.repeat_interleave(n, dim=0)).view(n, n)
    errors = (predicted - labels) ** 2
    per_class = [errors[labels == value].mean() for value in torch.unique(labels)]
    return torch.stack(per_class).mean()


# ---------------------------------------------------------------- preprocessing


def to_tensor(images: np.ndarray) -> torch.Tensor:
    """(B, H, W, 3) uint8 -> (B, 3, H, W) float normalised with MEAN/STD."""
    pixels = torch.as_tensor(images).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (pixels - mean) / std


def prepare(image: np.ndarray) -> np.ndarray:
    """Any HxWx3 uint8 RGB image -> the 224x224 centre crop of its 256x256 squashed copy.

    Squashing rather than cropping to a square keeps everything in the picture, so position
    words still hold; training crops at random from the same 256x256 copy.
    """
    from PIL import Image

    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        raise ValueError(f"images must be HxWx3 uint8 RGB, got {array.shape} {array.dtype}")
    if array.shape[:2] != (RESIZE, RESIZE):
        array = np.asarray(Image.fromarray(array).resize((RESIZE, RESIZE), Image.BILINEAR))
    offset = (RESIZE - CROP) // 2
    return array[offset:offset + CROP, offset:offset + CROP]
