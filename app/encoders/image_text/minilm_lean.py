"""A lean forward pass of the bundled MiniLM (a 6-layer BERT) for a search's few sentences.

Why: a text query's sentence is about a dozen tokens, and at that size the Hugging Face module
tree costs more than its arithmetic. Its 36 Linear layers do ~250 MFLOP, ~6 ms on one core of the
bench machine, while the whole forward took 12-16 ms on an idle core: the rest was module calls,
argument checks and attention-mask plumbing. This module runs the same operations with query, key
and value fused into one matrix product per layer (the three products share their input), and no
module tree; given the same (half-rounded, below) weights its vectors agree with
``SentenceTransformer.encode`` to float rounding, and with the float32 model to ~1e-4
(tests/encoders/test_minilm_query_path.py). Batches larger than a query's go through the library
(app/encoders/image_text/text_features.py decides).

On CPU each product keeps its weight in half precision and runs app/encoders/half_weights.py's
kernel (``_Product``): for a 10-token sentence the 24 products are ~85% of the forward, and they
are bound by reading the weights (42 MB of float32 per sentence), so half the bytes made a
sentence 11.5 -> 9.9 ms split over the two cores and 13.7 -> 10.9 ms on one thread (medians of
three blocks of 100 captions each, alternating, quiet 2-core machine; split still beats one thread
with half weights, 0.88x interleaved). The half weights move a sentence vector by
~1e-4 (cosine to float32 >= 0.9999999 over 300 captions; the same top-1 image for all of them
among 10^5, top-10 overlap 0.999; the held-out photo metrics of reports/image_text unchanged to
the third decimal). Where the kernel is unavailable or disagrees with ``F.linear`` of the rounded
weight at build, the product falls back to oneDNN with its float32 weight re-laid-out once in the
blocked format its kernel reads (7.1 instead of F.linear's 9.6 ms for the 24 products, GELU fused).
Either way the library model keeps its own float32 weights for batches (text_features.py).

A lone query (no other search in flight: app/encoders/side_thread.py) splits each layer in two
(``_Half``): half the attention heads, and half the intermediate units, each with its slice of the
output product. The halves are independent until their outputs are summed, so the side thread
computes one while the caller computes the other, and the two cores read the weights at once: 17.4
-> 13.9 ms per sentence, interleaved, on the 2-core machine. Concurrent queries use the whole
products on one thread each (the split alone, run serially, was ~12% slower). The halves hold their
own copy of the weights (another ~21 MB in half precision).

The weights are read from the loaded library model, so nothing else is stored or downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from numba.core.errors import NumbaError

from app.encoders.half_weights import HalfLinear
from app.encoders.side_thread import run_beside, spare_core


class _Product:
    """``x @ weight.T + bias``, then GELU if asked. On CPU the weight is kept in half precision
    and multiplied by app/encoders/half_weights.py's kernel (half the bytes to read); where that
    is unavailable or disagrees, oneDNN with a pre-packed float32 weight; ``F.linear`` elsewhere."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, gelu: bool = False) -> None:
        weight = weight.detach().contiguous()
        self.bias = bias.detach().contiguous() if bias is not None else None
        self.gelu = gelu
        self.half = _half(weight, self.bias)
        self.packed = _packed(weight, self.bias, gelu) if self.half is None else None
        # the plain weight only where it is used: a slice (a layer half) is a copy
        self.weight = weight if self.half is None and self.packed is None else None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.half is not None:
            rows = torch.from_numpy(self.half(x.reshape(-1, x.shape[-1]).numpy()))
            y = rows.reshape(*x.shape[:-1], rows.shape[-1])
            return F.gelu(y) if self.gelu else y
        if self.packed is not None:
            return _onednn(x, self.packed, self.bias, self.gelu)
        assert self.weight is not None
        y = F.linear(x, self.weight, self.bias)
        return F.gelu(y) if self.gelu else y


def _half(weight: torch.Tensor, bias: torch.Tensor | None) -> HalfLinear | None:
    """The half-precision product of ``weight``, or None where it cannot be used (not on CPU, the
    kernel does not compile, or it disagrees on a probe with ``F.linear`` of the rounded weight)."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return None
    try:
        half = HalfLinear(weight.numpy(), bias.numpy() if bias is not None else None)
        probe = torch.linspace(-1.0, 1.0, 3 * weight.shape[1], dtype=weight.dtype).reshape(3, weight.shape[1])
        want = F.linear(probe, torch.from_numpy(half.rounded_weight), bias)
        if not torch.allclose(torch.from_numpy(half(probe.numpy())), want, rtol=1e-4, atol=1e-4):
            return None
    except (ValueError, NumbaError):
        return None
    return half


def _onednn(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None, gelu: bool) -> torch.Tensor:
    # "gelu" with algorithm "none" is the exact (erf) GELU, BERT's hidden_act "gelu"
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "gelu" if gelu else "none", [], "none" if gelu else "")


def _packed(weight: torch.Tensor, bias: torch.Tensor | None, gelu: bool) -> torch.Tensor | None:
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
class _Half:
    """Half of a layer: some attention heads and some intermediate units, with the slices of the
    output products that read them (no bias: the layer adds it once to the halves' sum)."""

    qkv: _Product  # these heads' query, key and value rows
    attention_out: _Product  # the attention output's columns for these heads
    intermediate: _Product  # these intermediate units, with GELU
    output: _Product  # the output's columns for these units

    def attention(self, x: torch.Tensor, heads: int, attend: torch.Tensor | None) -> torch.Tensor:
        with torch.inference_mode():  # per thread: the side thread does not inherit the caller's mode
            return _attention(self.qkv, self.attention_out, x, heads, attend)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            return self.output(self.intermediate(x))


@dataclass
class _Layer:
    qkv: _Product  # query, key and value stacked: (3 * hidden, hidden)
    attention_out: _Product
    attention_norm: torch.nn.LayerNorm
    intermediate: _Product  # with BERT's GELU
    output: _Product
    output_norm: torch.nn.LayerNorm
    halves: tuple[_Half, _Half]


def _attention(qkv_product: _Product, out_product: _Product, x: torch.Tensor, heads: int,
               attend: torch.Tensor | None) -> torch.Tensor:
    """Multi-head self-attention of ``heads`` heads, through the output product."""
    n, length, _ = x.shape
    qkv = qkv_product(x)
    head_dim = qkv.shape[-1] // (3 * heads)
    q, k, v = qkv.view(n, length, 3, heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)  # each (n, heads, length, head_dim)
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=attend)
    return out_product(context.transpose(1, 2).reshape(n, length, heads * head_dim))


def _halves(qkv_weight: torch.Tensor, qkv_bias: torch.Tensor, layer: Any, heads: int) -> tuple[_Half, _Half]:
    """The layer cut into two independent halves (heads 0..h/2-1 and the rest; the first and second
    half of the intermediate units)."""
    hidden = qkv_weight.shape[1]
    width = hidden // heads * (heads // 2)  # the first half's share of the hidden dimension
    inner = layer.intermediate.dense.weight.shape[0] // 2
    out_weight, inter_weight = layer.attention.output.dense.weight, layer.intermediate.dense.weight
    halves = []
    for cols, units in ((slice(0, width), slice(0, inner)), (slice(width, hidden), slice(inner, None))):
        rows = torch.cat([torch.arange(hidden)[cols] + part * hidden for part in range(3)])  # q, k and v rows
        halves.append(_Half(
            qkv=_Product(qkv_weight[rows], qkv_bias[rows]),
            attention_out=_Product(out_weight[:, cols], None),
            intermediate=_Product(inter_weight[units], layer.intermediate.dense.bias[units], gelu=True),
            output=_Product(layer.output.dense.weight[:, units], None),
        ))
    return halves[0], halves[1]


class LeanMiniLM:
    """Sentence embeddings (mean pooling, unit length) from a SentenceTransformer wrapping a BERT."""

    def __init__(self, sentence_model: Any) -> None:
        transformer, pooling = sentence_model[0], sentence_model[1]
        bert = transformer.auto_model
        config = bert.config
        if (config.model_type != "bert" or config.hidden_act != "gelu" or config.num_attention_heads % 2
                or getattr(config, "position_embedding_type", "absolute") != "absolute"):
            raise ValueError("LeanMiniLM needs a BERT with gelu, absolute positions and an even number of heads, got "
                             f"{config.model_type}/{config.hidden_act}/{config.num_attention_heads}")
        pooling_config = pooling.get_config_dict()
        if pooling_config.get("pooling_mode") not in (None, "mean") or not pooling_config.get("include_prompt", True):
            raise ValueError(f"LeanMiniLM needs mean pooling, got {pooling_config}")
        self.model = sentence_model
        self.heads = config.num_attention_heads
        self.embeddings = bert.embeddings
        self.layers = []
        for layer in bert.encoder.layer:
            attention = layer.attention.self
            qkv_weight = torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]).detach()
            qkv_bias = torch.cat([attention.query.bias, attention.key.bias, attention.value.bias]).detach()
            self.layers.append(_Layer(
                qkv=_Product(qkv_weight, qkv_bias),
                attention_out=_Product(layer.attention.output.dense.weight, layer.attention.output.dense.bias),
                attention_norm=layer.attention.output.LayerNorm,
                intermediate=_Product(layer.intermediate.dense.weight, layer.intermediate.dense.bias, gelu=True),
                output=_Product(layer.output.dense.weight, layer.output.dense.bias),
                output_norm=layer.output.LayerNorm,
                halves=_halves(qkv_weight, qkv_bias, layer, self.heads),
            ))

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """(n, hidden) unit-length sentence embeddings."""
        features = self.model.preprocess(texts)
        device = self.embeddings.word_embeddings.weight.device
        ids = features["input_ids"].to(device)
        mask = features["attention_mask"].to(device)
        types = features.get("token_type_ids")
        split = device.type == "cpu" and spare_core()  # a lone query: both cores (module docstring)
        with torch.inference_mode():
            x = self.embeddings(input_ids=ids, token_type_ids=types.to(device) if types is not None else None)
            # padding keys are masked out, as BERT's extended attention mask does
            attend = mask[:, None, None, :].bool() if len(texts) > 1 else None
            half_heads = self.heads // 2
            for layer in self.layers:
                first, second = layer.halves
                if split:
                    a, b = run_beside(lambda: first.attention(x, half_heads, attend), lambda: second.attention(x, half_heads, attend))
                    x = layer.attention_norm(a + b + layer.attention_out.bias + x)
                    a, b = run_beside(lambda: first.feed_forward(x), lambda: second.feed_forward(x))
                    x = layer.output_norm(a + b + layer.output.bias + x)
                else:
                    x = layer.attention_norm(_attention(layer.qkv, layer.attention_out, x, self.heads, attend) + x)
                    x = layer.output_norm(layer.output(layer.intermediate(x)) + x)
            weights = mask.unsqueeze(-1).to(x.dtype)
            pooled = (x * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return F.normalize(pooled.float(), dim=1)
