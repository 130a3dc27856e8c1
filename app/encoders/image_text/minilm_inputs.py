"""One sentence -> MiniLM's embedded tokens (the input of its six layers), without the library's per-call machinery.

Why (issue 35): for a one-sentence query, sentence-transformers' ``preprocess`` (its input parsing, kwargs
merging and the tokenizer's Python wrapper) took ~0.3 ms and ``BertEmbeddings`` as a module ~0.2 ms of a
~3.3 ms forward, all of it holding the GIL that the service's other requests need. The same work is the
Rust tokenizer's ``encode`` on a private copy of the backend (truncation to the model's ``max_seq_length``,
no padding: one sentence is never padded) and the embedding sum in numpy followed by torch's own layer
norm kernel, ~0.05 ms in all.

The result is bit-identical to ``preprocess`` + ``BertEmbeddings`` (float32 sums in the library's order,
the same layer-norm kernel): :class:`SentenceInputs` checks that on probe sentences when it is built and
refuses to be built otherwise, and :func:`sentence_inputs` then keeps the library's path (:class:`LibraryInputs`);
tests/encoders/test_minilm_threads.py checks it on real captions.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)

# Built-in probes: a caption, upper case and accents (the normaliser), an empty string, whitespace only,
# and one past max_seq_length (truncation keeps the first tokens and the closing [SEP]).
PROBES = ("a red circle on a blue background", "Ünïcödé Wörds\tand\nnew lines, 42!", "", "   ", "word " * 300)


class SentenceInputs:
    """``(1, tokens, hidden)`` float32 embedded tokens of one sentence, as the library computes them."""

    def __init__(self, sentence_model: Any) -> None:
        from tokenizers import Tokenizer

        transformer = sentence_model[0]
        embeddings = transformer.auto_model.embeddings
        self.library = sentence_model
        self.library_embeddings = embeddings
        # a copy: the library's tokenizer call resets the backend's truncation and padding on every batch
        self.tokenizer = Tokenizer.from_str(transformer.tokenizer.backend_tokenizer.to_str())
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(int(transformer.max_seq_length))
        self.words = embeddings.word_embeddings.weight.detach().numpy()
        self.types = embeddings.token_type_embeddings.weight.detach().numpy()
        self.positions = embeddings.position_embeddings.weight.detach().numpy()
        norm = embeddings.LayerNorm
        self.norm_shape, self.norm_eps = tuple(norm.normalized_shape), float(norm.eps)
        self.norm_weight, self.norm_bias = norm.weight.detach(), norm.bias.detach()
        for text, alone, batched in zip(PROBES, [self(text) for text in PROBES], self.batch(list(PROBES))):
            reference = self.reference(text)
            if not (np.array_equal(alone, reference) and np.array_equal(batched, reference)):
                raise ValueError(f"the direct tokenizer and embedding differ from the library's on {text[:40]!r}")

    def __call__(self, text: str) -> np.ndarray:
        return self.batch([text])[0]

    def batch(self, texts: list[str]) -> list[np.ndarray]:
        """Each sentence's ``(1, tokens, hidden)`` embedded tokens, unpadded. One layer-norm call for all
        of them: the kernel normalises each token on its own, so the bits are a lone sentence's, and a
        batch takes the GIL back from torch once instead of once per sentence (where another thread
        holds it, each time back costs a wait)."""
        sums, lengths = [], []
        for text in texts:
            encoding = self.tokenizer.encode(text)
            ids = np.asarray(encoding.ids, dtype=np.int64)
            # BertEmbeddings' order: (word + token type) + position, then the layer norm (dropout: eval, none)
            x = self.words[ids] + self.types[np.asarray(encoding.type_ids, dtype=np.int64)]
            x += self.positions[: len(ids)]
            sums.append(x)
            lengths.append(len(ids))
        with torch.inference_mode():
            normed = F.layer_norm(torch.from_numpy(np.concatenate(sums)), self.norm_shape, self.norm_weight,
                                  self.norm_bias, self.norm_eps).numpy()
        return [part[None] for part in np.split(normed, np.cumsum(lengths)[:-1])]

    def reference(self, text: str) -> np.ndarray:
        """The library's own path: ``preprocess`` and ``BertEmbeddings``."""
        features = self.library.preprocess([text])
        with torch.inference_mode():
            x = self.library_embeddings(input_ids=features["input_ids"], token_type_ids=features.get("token_type_ids"))
        return x.numpy()


class LibraryInputs:
    """The library's own path with :class:`SentenceInputs`' interface: where the direct one disagrees."""

    def __init__(self, sentence_model: Any) -> None:
        self.library, self.library_embeddings = sentence_model, sentence_model[0].auto_model.embeddings

    reference = SentenceInputs.reference

    def __call__(self, text: str) -> np.ndarray:
        return self.reference(text)

    def batch(self, texts: list[str]) -> list[np.ndarray]:
        return [self.reference(text) for text in texts]


def sentence_inputs(sentence_model: Any) -> SentenceInputs | LibraryInputs:
    """The direct inputs, or the library's path (logged) where they would not be the same bits."""
    try:
        return SentenceInputs(sentence_model)
    except (ValueError, AttributeError, TypeError) as exc:  # a tokenizer without a Rust backend, another model
        log.warning("MiniLM's direct tokenizer and embedding unavailable (%s); using the library's", exc)
        return LibraryInputs(sentence_model)
