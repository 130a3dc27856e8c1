"""Training batches for the image-text model: generated scenes plus real captioned photos.

Real photos come from a directory laid out like ``shared/data/coco``: ``captions.jsonl`` with one
``{"file": ..., "captions": [...]}`` record per image. They are split once, by a seed, into a
training part and a held-out part; the held-out file names go into the checkpoint so the
quality report measures exactly the images and captions that training never saw.

Augmentation follows the paper (after AlexNet): random 224x224 crops of the 256x256 image,
mirror flips, and PCA colour augmentation. Flips are applied to photos only: a mirrored scene
would contradict its "on the left" caption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from app.encoders.image_text.model import CROP, RESIZE
from app.training.synthesis.images import IRRELEVANT, RELEVANT_PLUS, Scene, caption_relevance, render


@dataclass(frozen=True)
class Photo:
    """One real image (squashed to 256x256) and its captions."""

    file: str
    pixels: np.ndarray
    captions: tuple[str, ...]


def read_records(directory: str | Path) -> list[dict]:
    """The captions.jsonl records of a photo directory, in file order."""
    path = Path(directory) / "captions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def split_records(records: Sequence[dict], n_holdout: int, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held-out): a seeded permutation of the records sorted by file name."""
    ordered = sorted(records, key=lambda r: r["file"])
    order = np.random.default_rng(seed).permutation(len(ordered))
    held = {int(i) for i in order[:n_holdout]}
    return ([r for i, r in enumerate(ordered) if i not in held], [r for i, r in enumerate(ordered) if i in held])


def load_photo(directory: str | Path, record: dict) -> Photo:
    image = Image.open(Path(directory) / record["file"]).convert("RGB").resize((RESIZE, RESIZE), Image.BILINEAR)
    return Photo(record["file"], np.asarray(image, dtype=np.uint8), tuple(record["captions"]))


# ---------------------------------------------------------------- augmentation


def random_crop(image: np.ndarray, rng: np.random.Generator, size: int = CROP) -> np.ndarray:
    """A ``size`` x ``size`` window at a uniformly random position."""
    y = int(rng.integers(0, image.shape[0] - size + 1))
    x = int(rng.integers(0, image.shape[1] - size + 1))
    return image[y:y + size, x:x + size]


def centre_crop(image: np.ndarray, size: int = CROP) -> np.ndarray:
    y, x = (image.shape[0] - size) // 2, (image.shape[1] - size) // 2
    return image[y:y + size, x:x + size]


def colour_pca(images: Sequence[np.ndarray], max_pixels: int = 200_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (3,) and eigenvectors (3, 3, columns) of the RGB covariance of [0, 1] pixels."""
    rng = np.random.default_rng(seed)
    pixels = np.concatenate([np.asarray(im, np.float32).reshape(-1, 3) / 255.0 for im in images])
    if len(pixels) > max_pixels:
        pixels = pixels[rng.choice(len(pixels), max_pixels, replace=False)]
    eigenvalues, eigenvectors = np.linalg.eigh(np.cov(pixels, rowvar=False))
    return np.maximum(eigenvalues, 0.0), eigenvectors


def pca_colour_shift(image: np.ndarray, eigenvalues: np.ndarray, eigenvectors: np.ndarray,
                     rng: np.random.Generator, sigma: float = 0.1) -> np.ndarray:
    """AlexNet's PCA colour augmentation: add sum_i alpha_i * lambda_i * p_i to every pixel.

    alpha_i ~ N(0, sigma); lambda_i, p_i are the eigenvalues and eigenvectors of the RGB
    covariance. Intensity shifts follow the directions colours vary in natural data, so the
    object's colour name stays true for small sigma.
    """
    alpha = rng.normal(0.0, sigma, size=3)
    shift = eigenvectors @ (alpha * eigenvalues)  # (3,) in [0, 1] units
    shifted = image.astype(np.float32) + 255.0 * shift
    return np.clip(np.rint(shifted), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------- batches


@dataclass
class Batch:
    images: np.ndarray  # (B, 224, 224, 3) uint8
    captions: list[str]
    labels: np.ndarray  # (B, B) graded relevance of caption i to image j


class BatchSampler:
    """Draws mixed batches of generated scenes and photos, one caption per image."""

    def __init__(self, scenes: Sequence[Scene], photos: Sequence[Photo], photo_fraction: float,
                 eigen: tuple[np.ndarray, np.ndarray], augment: bool = True, pca_sigma: float = 0.1) -> None:
        self.scenes = list(scenes)
        self.photos = list(photos)
        self.photo_fraction = photo_fraction if self.photos else 0.0
        self.eigenvalues, self.eigenvectors = eigen
        self.augment = augment
        self.pca_sigma = pca_sigma
        # Rendering costs ~4 ms a scene, as much as a CPU training step spends per image, so each
        # scene is drawn once and kept (256x256x3 bytes: 4000 scenes take ~790 MB).
        self._rendered: dict[int, np.ndarray] = {}

    def _scene_pixels(self, index: int) -> np.ndarray:
        pixels = self._rendered.get(index)
        if pixels is None:
            pixels = self._rendered[index] = render(self.scenes[index])
        return pixels

    def _view(self, image: np.ndarray, rng: np.random.Generator, is_photo: bool) -> np.ndarray:
        if not self.augment:
            return centre_crop(image)
        view = random_crop(image, rng)
        if is_photo and rng.random() < 0.5:
            view = view[:, ::-1]
        return pca_colour_shift(view, self.eigenvalues, self.eigenvectors, rng, self.pca_sigma)

    def sample(self, batch_size: int, rng: np.random.Generator) -> Batch:
        n_photos = min(int(round(batch_size * self.photo_fraction)), len(self.photos))
        photo_ids = rng.choice(len(self.photos), n_photos, replace=False) if n_photos else np.zeros(0, int)
        scene_ids = rng.choice(len(self.scenes), batch_size - n_photos, replace=False)
        images, captions, owners = [], [], []
        for s in scene_ids:
            scene = self.scenes[int(s)]
            c = int(rng.integers(len(scene.captions)))
            images.append(self._view(self._scene_pixels(int(s)), rng, is_photo=False))
            captions.append(scene.captions[c])
            owners.append((scene, c))
        for p in photo_ids:
            photo = self.photos[int(p)]
            images.append(self._view(photo.pixels, rng, is_photo=True))
            captions.append(photo.captions[int(rng.integers(len(photo.captions)))])
            owners.append(None)
        return Batch(np.stack(images), captions, _labels(owners))


def _labels(owners: list[tuple[Scene, int] | None]) -> np.ndarray:
    """Graded labels; photos have no attributes, so only their own caption is relevant to them."""
    n = len(owners)
    labels = np.full((n, n), IRRELEVANT, np.float32)
    for i, owner in enumerate(owners):
        for j, other in enumerate(owners):
            if i == j:
                labels[i, j] = RELEVANT_PLUS
            elif owner is not None and other is not None:
                labels[i, j] = caption_relevance(owner[0], owner[1], other[0], same_image=False)
    return labels
