"""Tiny randomly-initialised models exported to ONNX inside the tests, and encoder folders around them.

Nothing is downloaded: a CLIP-style pair (a conv image tower, an embedding-bag text tower over a
``tokenizer.json`` built here with the ``tokenizers`` package) and an audio embedder (frames, a
linear layer, mean over time), each exported with torch.onnx.export, plus the reference code that
runs the same torch modules directly, so a test can compare the service's answers with them.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from app.features.pretrained import sha256_file

pytest.importorskip("onnx")  # the exporter needs it (a test extra)

DIM = 16
IMAGE_SIZE = 32
CONTEXT = 8
SAMPLE_RATE = 8000
WINDOW_S = 0.25
HOP_S = 0.125
WORDS = ["red", "green", "blue", "circle", "square", "a", "on", "dog", "photo", "of", "the", "background"]
MEAN = [0.5, 0.4, 0.3]
STD = [0.25, 0.2, 0.3]


class TinyImageTower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, kernel_size=4, stride=4)
        self.proj = torch.nn.Linear(8, DIM)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.relu(self.conv(pixels)).mean(dim=(2, 3)))


class TinyTextTower(torch.nn.Module):
    """Mean of the non-padding tokens' embeddings (pad id 0), then a linear layer."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 12)
        self.proj = torch.nn.Linear(12, DIM)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = (ids != 0).float().unsqueeze(-1)
        pooled = (self.embed(ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.proj(pooled)


class TinyAudio(torch.nn.Module):
    """Non-overlapping frames of 100 samples, a linear layer with tanh, mean over frames, a projection."""

    def __init__(self) -> None:
        super().__init__()
        self.frame = torch.nn.Linear(100, 24)
        self.proj = torch.nn.Linear(24, DIM)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        frames = wave.reshape(wave.shape[0], -1, 100)
        return self.proj(torch.tanh(self.frame(frames)).mean(1))


def export(module: torch.nn.Module, example: torch.Tensor, path: Path, input_name: str, dynamic: dict[int, str]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module.eval(), (example,), str(path), input_names=[input_name], output_names=["embedding"],
                          dynamic_axes={input_name: dynamic, "embedding": {0: "batch"}}, dynamo=False)
    return path


def build_tokenizer(path: Path) -> Path:
    """A word-level tokenizer.json: lowercase, split on whitespace and punctuation, <sot> ... <eot>."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    vocab = {"<pad>": 0, "<unk>": 1, "<sot>": 2, "<eot>": 3, **{w: i + 4 for i, w in enumerate(WORDS)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.post_processor = processors.TemplateProcessing(single="<sot> $A <eot>", special_tokens=[("<sot>", 2), ("<eot>", 3)])
    tokenizer.save(str(path))
    return path


def write_manifest(folder: Path, manifest: dict[str, Any]) -> Path:
    manifest = {**manifest, "files": {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.name != "manifest.json"}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return folder


def clip_folder(folder: Path, seed: int = 0, name: str = "tiny-clip", **overrides: Any) -> tuple[Path, TinyImageTower, TinyTextTower]:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    image, text = TinyImageTower(), TinyTextTower(len(WORDS) + 4)
    export(image, torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE), folder / "image.onnx", "pixel_values", {0: "batch"})
    export(text, torch.zeros(1, CONTEXT, dtype=torch.int64), folder / "text.onnx", "input_ids", {0: "batch"})
    build_tokenizer(folder / "tokenizer.json")
    manifest = {
        "format": "recall-encoder/1", "name": name, "family": "onnx-clip", "modality": "image", "dim": DIM, "bits": DIM,
        "licence": "MIT", "source": "tests/encoders/onnx_models.py (random weights)", "version": f"seed{seed}",
        "description": "a tiny random CLIP-style pair",
        "image": {"model": "image.onnx", "size": IMAGE_SIZE, "mean": MEAN, "std": STD},
        "text": {"model": "text.onnx", "tokenizer": "tokenizer.json", "context_length": CONTEXT, "pad_id": 0},
        **overrides,
    }
    return write_manifest(folder, manifest), image, text


def audio_folder(folder: Path, seed: int = 0, name: str = "tiny-audio", **overrides: Any) -> tuple[Path, TinyAudio]:
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    model = TinyAudio()
    window = int(SAMPLE_RATE * WINDOW_S)
    export(model, torch.zeros(1, window), folder / "audio.onnx", "waveform", {0: "batch"})
    manifest = {
        "format": "recall-encoder/1", "name": name, "family": "onnx-audio", "modality": "audio", "dim": DIM, "bits": DIM,
        "licence": "CC-BY-4.0", "source": "tests/encoders/onnx_models.py (random weights)", "version": f"seed{seed}",
        "audio": {"model": "audio.onnx", "sample_rate": SAMPLE_RATE, "window_s": WINDOW_S, "hop_s": HOP_S,
                  "input": "waveform", "input_name": "waveform"},
        **overrides,
    }
    return write_manifest(folder, manifest), model


# --- the reference: the same torch modules called directly, with the documented preprocessing ---


def reference_pixels(image: np.ndarray) -> np.ndarray:
    """open_clip's eval transform written out with PIL: shorter side to size (bicubic), centre crop, normalise."""
    from PIL import Image

    picture = Image.fromarray(image)
    scale = IMAGE_SIZE / min(picture.size)
    w, h = max(IMAGE_SIZE, round(picture.width * scale)), max(IMAGE_SIZE, round(picture.height * scale))
    picture = picture.resize((w, h), Image.BICUBIC)
    left, top = (w - IMAGE_SIZE) // 2, (h - IMAGE_SIZE) // 2
    pixels = np.asarray(picture.crop((left, top, left + IMAGE_SIZE, top + IMAGE_SIZE)), np.float32) / 255.0
    return ((pixels - np.float32(MEAN)) / np.float32(STD)).transpose(2, 0, 1)


def reference_ids(text: str, tokenizer_path: Path) -> np.ndarray:
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(tokenizer_path)).encode(text).ids
    if len(ids) > CONTEXT:  # open_clip's rule: cut, and end with the end-of-text token anyway
        ids = ids[: CONTEXT - 1] + ids[-1:]
    return np.asarray(ids + [0] * (CONTEXT - len(ids)), np.int64)


def unit(x: torch.Tensor) -> np.ndarray:
    v = x.detach().double().numpy()
    return v / np.linalg.norm(v, axis=1, keepdims=True)
