"""A lean forward pass of the bundled MiniLM (a 6-layer BERT) for a search's few sentences.

Why: a text query's sentence is about a dozen tokens, and at that size the Hugging Face module
tree costs more than its arithmetic. Its 36 Linear layers do ~250 MFLOP, ~6 ms on one core of the
bench machine, while the whole forward took 12-16 ms on an idle core: the rest was module calls,
argument checks and attention-mask plumbing. This module runs the same weights through the same
operations with query, key and value fused into one matrix product per layer (the three products
share their input), and no module tree; vectors agree with ``SentenceTransformer.encode`` to float
rounding (tests/encoders/test_minilm_query_path.py). Batches larger than a query's go through the
library (app/encoders/text_features.py decides).

On CPU each product runs on oneDNN with its weight re-laid-out once, at build, in the blocked
format oneDNN's kernel reads (``_Product``); the library's ``F.linear`` re-reads the plain layout
every call. For a 10-token sentence the 36 products are ~85% of the forward, and on the 2-core
bench machine (AMD EPYC, AVX2) they took 7.1 instead of 9.6 ms (best of 20, same weights),
the GELU fused into the intermediate product. That costs a second copy of the layer weights
(~42 MB): the library model keeps its own for batches.

The weights are read from the loaded library model, so nothing else is stored or downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


class _Product:
    """``x @ weight.T + bias``, then GELU if asked: oneDNN with a pre-packed weight on CPU,
    ``F.linear`` elsewhere or where oneDNN's packed product is unavailable or disagrees."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False) -> None:
        self.weight = weight.detach()
        self.bias = bias.detach()
        self.gelu = gelu
        self.packed = _packed(self.weight, self.bias, gelu)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed is not None:
            return _onednn(x, self.packed, self.bias, self.gelu)
        y = F.linear(x, self.weight, self.bias)
        return F.gelu(y) if self.gelu else y


def _onednn(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor, gelu: bool) -> torch.Tensor:
    # "gelu" with algorithm "none" is the exact (erf) GELU, BERT's hidden_act "gelu"
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "gelu" if gelu else "none", [], "none" if gelu else "")


def _packed(weight: torch.Tensor, bias: torch.Tensor, gelu: bool) -> torch.Tensor | None:
    """oneDNN's blocked copy of ``weight``, or None where it cannot be used.

    These are torch's internal operators (what its compiler emits for CPU linear layers), so the
    packed product is checked against ``F.linear`` once here: a torch whose operators changed
    falls back to the plain product instead of answering differently.
    """
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        probe = torch.linspace(-1.0, 1.0, 3 * weight.shape[1], dtype=weight.dtype).reshape(3, weight.shape[1])
        want = F.linear(probe, weight, bias)
        if gelu:
            want = F.gelu(want)
        if not torch.allclose(_onednn(probe, packed, bias, gelu), want, rtol=1e-4, atol=1e-4):
            return None
    except (AttributeError, RuntimeError):  # no such operator in this torch build
        return None
    return packed


@dataclass
class _Layer:
    qkv: _Product  # query, key and value stacked: (3 * hidden, hidden)
    attention_out: _Product
    attention_norm: torch.nn.LayerNorm
    intermediate: _Product  # with BERT's GELU
    output: _Product
    output_norm: torch.nn.LayerNorm


class LeanMiniLM:
    """Sentence embeddings (mean pooling, unit length) from a SentenceTransformer wrapping a BERT."""

    def __init__(self, sentence_model: Any) -> None:
        transformer, pooling = sentence_model[0], sentence_model[1]
        bert = transformer.auto_model
        config = bert.config
        if config.model_type != "bert" or config.hidden_act != "gelu" or getattr(config, "position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"LeanMiniLM needs a BERT with gelu and absolute positions, got {config.model_type}/{config.hidden_act}")
        pooling_config = pooling.get_config_dict()
        if pooling_config.get("pooling_mode") not in (None, "mean") or not pooling_config.get("include_prompt", True):
            raise ValueError(f"LeanMiniLM needs mean pooling, got {pooling_config}")
        self.model = sentence_model
        self.heads = config.num_attention_heads
        self.embeddings = bert.embeddings
        self.layers = []
        for layer in bert.encoder.layer:
            attention = layer.attention.self
            self.layers.append(_Layer(
                qkv=_Product(torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]),
                             torch.cat([attention.query.bias, attention.key.bias, attention.value.bias])),
                attention_out=_Product(layer.attention.output.dense.weight, layer.attention.output.dense.bias),
                attention_norm=layer.attention.output.LayerNorm,
                intermediate=_Product(layer.intermediate.dense.weight, layer.intermediate.dense.bias, gelu=True),
                output=_Product(layer.output.dense.weight, layer.output.dense.bias),
                output_norm=layer.output.LayerNorm,
            ))

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """(n, hidden) unit-length sentence embeddings."""
        features = self.model.preprocess(texts)
        device = self.layers[0].qkv.weight.device
        ids = features["input_ids"].to(device)
        mask = features["attention_mask"].to(device)
        types = features.get("token_type_ids")
        with torch.inference_mode():
            x = self.embeddings(input_ids=ids, token_type_ids=types.to(device) if types is not None else None)
            n, length, hidden = x.shape
            head_dim = hidden // self.heads
            # padding keys are masked out, as BERT's extended attention mask does
            attend = mask[:, None, None, :].bool() if n > 1 else None
            for layer in self.layers:
                qkv = layer.qkv(x).view(n, length, 3, self.heads, head_dim)
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (n, heads, length, head_dim)
                context = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
                context = context.transpose(1, 2).reshape(n, length, hidden)
                x = layer.attention_norm(layer.attention_out(context) + x)
                x = layer.output_norm(layer.output(layer.intermediate(x)) + x)
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return F.normalize(pooled.float(), dim=1)
