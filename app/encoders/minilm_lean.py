"""A lean forward pass of the bundled MiniLM (a 6-layer BERT) for a search's few sentences.

Why: a text query's sentence is about a dozen tokens, and at that size the Hugging Face module
tree costs more than its arithmetic. Its 36 Linear layers do ~250 MFLOP, ~6 ms on one core of the
bench machine, while the whole forward took 12-16 ms on an idle core: the rest was module calls,
argument checks and attention-mask plumbing. This module runs the same weights through the same
operations with query, key and value fused into one matrix product per layer (the three products
share their input), and no module tree; vectors agree with ``SentenceTransformer.encode`` to float
rounding (tests/encoders/test_minilm_query_path.py). Batches larger than a query's go through the
library (app/encoders/text_features.py decides).

The weights are read from the loaded library model, so nothing else is stored or downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass
class _Layer:
    qkv_weight: torch.Tensor  # (3 * hidden, hidden): query, key and value stacked
    qkv_bias: torch.Tensor
    attention_out: torch.nn.Linear
    attention_norm: torch.nn.LayerNorm
    intermediate: torch.nn.Linear
    output: torch.nn.Linear
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
                qkv_weight=torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]).detach(),
                qkv_bias=torch.cat([attention.query.bias, attention.key.bias, attention.value.bias]).detach(),
                attention_out=layer.attention.output.dense,
                attention_norm=layer.attention.output.LayerNorm,
                intermediate=layer.intermediate.dense,
                output=layer.output.dense,
                output_norm=layer.output.LayerNorm,
            ))

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """(n, hidden) unit-length sentence embeddings."""
        features = self.model.preprocess(texts)
        device = self.layers[0].qkv_weight.device
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
                qkv = F.linear(x, layer.qkv_weight, layer.qkv_bias).view(n, length, 3, self.heads, head_dim)
                q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (n, heads, length, head_dim)
                context = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
                context = context.transpose(1, 2).reshape(n, length, hidden)
                x = layer.attention_norm(layer.attention_out(context) + x)
                x = layer.output_norm(layer.output(F.gelu(layer.intermediate(x))) + x)
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return F.normalize(pooled.float(), dim=1)
