"""Text-to-image encoder: images and sentences in one space, plus a relevance head to re-rank.

Loaded from a checkpoint directory of family ``image-text`` (see :mod:`app.encoders.checkpoint`);
the architecture and the text features (MiniLM or a stored TF-IDF vocabulary) come from its
config, and weights that do not fit that config are refused.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from app.encoders.base import Embeddings, Encoder, check_embeddings, sign_codes
from app.encoders.checkpoint import CheckpointError, load_checkpoint, load_state_strict
from app.encoders.image_text.model import ImageTextModel, prepare, to_tensor
from app.encoders.image_text.text_features import TextFeatures, features_from_config

FAMILY = "image-text"


class ImageTextEncoder(Encoder):
    """CNN image tower + FC text tower sharing one space, and an FC relevance head.

    ``encode`` embeds images, ``encode_text`` embeds queries into the same space (stage 1 is an
    inner-product search), and ``rerank`` scores stored image embeddings against a query with
    the head (stage 2). Binary codes are the signs of the float embedding.
    """

    modality = "image"
    supports_text = True
    supports_rerank = True

    def __init__(self, model: ImageTextModel, text_features: TextFeatures, config: dict[str, Any]) -> None:
        super().__init__()
        self.model = model.eval()
        self.text_features = text_features
        self.config = config
        self.name = str(config["name"])
        self.dim = int(config["architecture"]["dim"])
        self.bits = int(config.get("bits", self.dim))
        if self.bits != self.dim:
            raise CheckpointError(f"{self.name}: bits ({self.bits}) must equal dim ({self.dim}); codes are signs")
        self.description = (
            f"block network (paper 003): CNN image tower, FC text tower over {text_features.kind} "
            "sentence vectors, FC relevance head for re-ranking"
        )
        self.batch_size = 32
        # The service embeds a query once for stage 1 and again when it re-ranks; MiniLM is most of
        # that cost, so recent query embeddings are kept (bounded, least recently used dropped).
        self._text_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._text_cache_size = 1024
        self._text_cache_lock = threading.Lock()
        self.text_cache_hits = self.text_cache_misses = 0  # per text, for the hit rate in /metrics (issue 35)

    def to(self, device: str) -> "ImageTextEncoder":
        self.model.to(device)
        self._text_cache.clear()
        if hasattr(self.text_features, "device"):
            self.text_features.device = device  # only matters before MiniLM is first loaded
        self.device = device
        return self

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        """Embed HxWx3 uint8 RGB images of any size (squashed to 256, centre 224 crop)."""
        outputs = []
        with torch.inference_mode():
            for start in range(0, len(inputs), self.batch_size):
                batch = np.stack([prepare(image) for image in inputs[start:start + self.batch_size]])
                outputs.append(self.model.image_tower(to_tensor(batch).to(self.device)).float().cpu().numpy())
        floats = np.concatenate(outputs) if outputs else np.zeros((0, self.dim), np.float32)
        return self._embeddings(floats)

    def encode_text(self, texts: Sequence[str]) -> Embeddings:
        """Embed queries into the image space."""
        return self._embeddings(self._text_embeddings(texts))

    def rerank(self, text: str, image_floats: np.ndarray) -> np.ndarray:
        """Head relevance in [0, 1] of each stored image embedding (n, dim) to ``text``."""
        image_floats = np.asarray(image_floats, dtype=np.float32)
        if image_floats.ndim != 2 or image_floats.shape[1] != self.dim:
            raise ValueError(f"image embeddings must be (n, {self.dim}), got {image_floats.shape}")
        if len(image_floats) == 0:
            return np.zeros(0, np.float32)
        query = torch.as_tensor(self._text_embeddings([text]), device=self.device)
        with torch.inference_mode():
            images = torch.as_tensor(image_floats, device=self.device)
            scores = self.model.head(images, query.expand(len(images), -1))
        return scores.float().cpu().numpy()

    def _text_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        with self._text_cache_lock:
            cached = {t: self._text_cache[t] for t in texts if t in self._text_cache}
            for t in cached:
                self._text_cache.move_to_end(t)
            self.text_cache_hits += sum(1 for t in texts if t in cached)
            self.text_cache_misses += sum(1 for t in texts if t not in cached)
        missing = list(dict.fromkeys(t for t in texts if t not in cached))
        if missing:
            vectors = torch.as_tensor(self.text_features(missing), device=self.device)
            with torch.inference_mode():
                fresh = self.model.text_tower(vectors).float().cpu().numpy()
            with self._text_cache_lock:
                for t, row in zip(missing, fresh):
                    cached[t] = row
                    self._text_cache[t] = row
                while len(self._text_cache) > self._text_cache_size:
                    self._text_cache.popitem(last=False)
        return np.stack([cached[t] for t in texts]).copy()

    def _embeddings(self, floats: np.ndarray) -> Embeddings:
        floats = np.ascontiguousarray(floats, dtype=np.float32)
        return check_embeddings(Embeddings(floats=floats, codes=sign_codes(floats)), n=len(floats), dim=self.dim,
                                bits=self.bits)

    def describe(self) -> dict[str, Any]:
        described = {**super().describe(), "text_features": self.text_features.kind}
        if hasattr(self.text_features, "effective_precision"):  # MiniLM: the query path's precision (issue 35)
            described["text_query_precision"] = self.text_features.effective_precision()
        return described


def build(state_dict: dict[str, torch.Tensor], config: dict[str, Any], where: str) -> ImageTextEncoder:
    """An encoder from weights and config, refusing a config of another family or shape."""
    if config.get("family") != FAMILY:
        raise CheckpointError(f"{where}: family {config.get('family')!r}, expected {FAMILY!r}")
    try:
        text_features = features_from_config(config["text_features"])
        model = ImageTextModel.from_config(config)
    except (KeyError, ValueError, TypeError) as exc:
        raise CheckpointError(f"{where}: config does not describe an image-text model ({exc})") from exc
    if text_features.dim != int(config["architecture"]["text_dim"]):
        raise CheckpointError(f"{where}: text features have {text_features.dim} dims, the tower expects "
                              f"{config['architecture']['text_dim']}")
    load_state_strict(model, state_dict, where)
    return ImageTextEncoder(model, text_features, config)


def load(directory: Path, config: dict[str, Any]) -> ImageTextEncoder:
    """Registry entry point: the encoder stored in a checkpoint directory."""
    state_dict, stored = load_checkpoint(directory)
    return build(state_dict, stored, str(directory))
