"""Family ``onnx-clip``: an image tower and a text tower sharing one space (CLIP-style).

As open_clip and Hugging Face export them: the image model takes (batch, 3, size, size) float32
pixels, resized so the shorter side is ``size`` (bicubic), centre-cropped, scaled to [0, 1] and
normalised with the manifest's ``mean`` and ``std``; the text model takes (batch, context_length)
token ids from the folder's ``tokenizer.json`` (read by the ``tokenizers`` package), padded with
``pad_id``, and an ``attention_mask`` when the model has that input. No relevance head: text
searches rank by the towers' cosine alone.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from PIL import Image

from app.encoders.base import Embeddings
from app.encoders.onnx_folder.encoder import OnnxEncoder, batches
from app.encoders.onnx_folder.manifest import FolderError, Manifest, fields
from app.encoders.onnx_folder.session import check_output_width, input_of, open_session, output_of, static_dims

MASK = "attention_mask"


def preprocess(image: np.ndarray, size: int, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """HxWx3 uint8 RGB -> (3, size, size) float32, open_clip's eval transform."""
    picture = Image.fromarray(np.asarray(image, dtype=np.uint8)).convert("RGB")
    scale = size / min(picture.size)
    width, height = max(size, round(picture.width * scale)), max(size, round(picture.height * scale))
    picture = picture.resize((width, height), Image.BICUBIC)
    left, top = (width - size) // 2, (height - size) // 2
    picture = picture.crop((left, top, left + size, top + size))
    pixels = np.asarray(picture, dtype=np.float32) / 255.0
    return ((pixels - mean) / std).transpose(2, 0, 1).astype(np.float32)


class OnnxClipEncoder(OnnxEncoder):
    modality = "image"
    supports_text = True

    def __init__(self, manifest: Manifest, threads: int = 1) -> None:
        super().__init__(manifest, threads)
        folder = manifest.folder
        image = fields(folder, manifest.parts["image"].options, "image.")
        self.size = image.int("size", low=8, high=4096)
        self.mean = self._triple(image.raw.get("mean", [0.48145466, 0.4578275, 0.40821073]), "image.mean")
        self.std = self._triple(image.raw.get("std", [0.26862954, 0.26130258, 0.27577711]), "image.std")
        if np.any(self.std <= 0):
            raise FolderError(folder, "manifest_field", "'image.std' must be positive")
        text = fields(folder, manifest.parts["text"].options, "text.")
        self.context_length = text.int("context_length", low=1, high=8192)
        self.pad_id = text.int("pad_id", low=0, high=10**7, default=0)
        self.tokenizer = self._tokenizer(text.str("tokenizer"))
        self.open_sessions()

    def _triple(self, value: Any, key: str) -> np.ndarray:
        ok = isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        if not ok or not np.all(np.isfinite(np.asarray(value, dtype=np.float64))):
            raise FolderError(self.manifest.folder, "manifest_field", f"'{key}' must be three numbers (R, G, B)")
        return np.asarray(value, dtype=np.float32)

    def _tokenizer(self, file_name: str) -> Any:
        from tokenizers import Tokenizer

        try:
            tokenizer = Tokenizer.from_file(str(self.manifest.folder / file_name))
        except Exception as exc:  # noqa: BLE001 - the tokenizers package raises plain Exception
            raise FolderError(self.manifest.folder, "tokenizer", f"{file_name} is not a tokenizer the tokenizers package can read ({exc})") from exc
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.context_length)
        return tokenizer

    def open_sessions(self) -> None:
        m = self.manifest
        self.image_session = open_session(m, "image", self.device, self.threads)
        self.text_session = open_session(m, "text", self.device, self.threads)
        node = input_of(m, self.image_session, "image")
        dims = static_dims(node)
        if len(dims) != 4 or dims[1] not in (None, 3) or any(d not in (None, self.size) for d in dims[2:]):
            raise FolderError(m.folder, "shape", f"{m.parts['image'].model} input {node.name!r} has shape {node.shape}; "
                              f"(batch, 3, {self.size}, {self.size}) expected from 'image.size'")
        self.image_input = node.name
        self.image_output = output_of(m, self.image_session, "image").name
        check_output_width(m, "image", output_of(m, self.image_session, "image"))
        text_node = input_of(m, self.text_session, "text", optional=(MASK,))
        dims = static_dims(text_node)
        if len(dims) != 2 or dims[1] not in (None, self.context_length):
            raise FolderError(m.folder, "shape", f"{m.parts['text'].model} input {text_node.name!r} has shape {text_node.shape}; "
                              f"(batch, {self.context_length}) expected from 'text.context_length'")
        self.text_input = text_node.name
        self.ids_dtype = np.int32 if text_node.type == "tensor(int32)" else np.int64
        self.has_mask = any(n.name == MASK and n.name != self.text_input for n in self.text_session.get_inputs())
        self.text_output = output_of(m, self.text_session, "text").name
        check_output_width(m, "text", output_of(m, self.text_session, "text"))

    def pixels(self, images: Sequence[np.ndarray]) -> np.ndarray:
        return np.stack([preprocess(image, self.size, self.mean, self.std) for image in images])

    def tokens(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(ids, mask), each (n, context_length)."""
        ids = np.full((len(texts), self.context_length), self.pad_id, dtype=self.ids_dtype)
        mask = np.zeros((len(texts), self.context_length), dtype=self.ids_dtype)
        for row, encoding in enumerate(self.tokenizer.encode_batch(list(texts))):
            tokens = encoding.ids[: self.context_length]
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        return ids, mask

    def encode(self, inputs: Sequence[np.ndarray]) -> Embeddings:
        outputs = [self.image_session.run([self.image_output], {self.image_input: self.pixels(chunk)})[0]
                   for chunk in batches(list(inputs), self.batch_size)]
        raw = np.concatenate(outputs) if outputs else np.zeros((0, self.dim), np.float32)
        return self.finish(raw, len(inputs), self.manifest.parts["image"].model)

    def encode_text(self, texts: Sequence[str]) -> Embeddings:
        outputs = []
        for chunk in batches(list(texts), self.batch_size):
            ids, mask = self.tokens(chunk)
            feed = {self.text_input: ids, **({MASK: mask} if self.has_mask else {})}
            outputs.append(self.text_session.run([self.text_output], feed)[0])
        raw = np.concatenate(outputs) if outputs else np.zeros((0, self.dim), np.float32)
        return self.finish(raw, len(texts), self.manifest.parts["text"].model)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "image_size": self.size, "context_length": self.context_length}


def load(manifest: Manifest, threads: int) -> OnnxClipEncoder:
    return OnnxClipEncoder(manifest, threads)
