"""onnxruntime's integer product kernels at MiniLM's shapes: why int8_block32 is the product issue 35 ships.

    python -m bench.image.minilm_kernels [--tokens 12] [--calls 300]

A lone text query's MiniLM forward is ~2.2 ms of MatMulNBits calls out of ~2.8 ms (onnxruntime's profiler,
int8_block32). This bench times one product of each of MiniLM's layer shapes (384 -> 384, 384 -> 1536,
1536 -> 384) on one thread, for a sentence of ``--tokens`` tokens, in every integer form onnxruntime offers:

* ``MatMulNBits`` (com.microsoft) with 8-bit and 4-bit codes, blocks of 16 / 32 / 64, at accuracy level 4
  (each token's input rounded to int8 per block, what int8_block32 ships) and at level 0 (float inputs);
* ``DynamicQuantizeMatMul`` (com.microsoft), onnxruntime's int8 GEMM with one input scale for the whole tensor:
  the arithmetic of the ``int8`` precision, which missed issue 35's rule (README, Numbers: per-tensor rounding
  coarsens every token's grid to its largest activation).

Per form: the median time of each shape and a layer's estimate (query/key/value as three 384 -> 384 products, the
attention output, the two feed-forward products). The weights are random: speed does not depend on their
values. Writes ``bench/results/minilm_kernels.json``. Needs the ``onnx`` development package.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from bench.output import write_results
from bench.service.query_path import RESULTS

OUT = RESULTS / "minilm_kernels.json"
SHAPES = {"attention": (384, 384), "intermediate": (384, 1536), "output": (1536, 384)}
# (name, operator, bits, block, accuracy level)
FORMS = [
    ("nbits8_block32_acc4", "MatMulNBits", 8, 32, 4),  # int8_block32, the default
    ("nbits8_block64_acc4", "MatMulNBits", 8, 64, 4),  # int8_block64, opt-in
    ("nbits4_block16_acc4", "MatMulNBits", 4, 16, 4),
    ("nbits4_block32_acc4", "MatMulNBits", 4, 32, 4),
    ("nbits4_block64_acc4", "MatMulNBits", 4, 64, 4),
    ("nbits4_block32_acc0", "MatMulNBits", 4, 32, 0),
    ("nbits8_block32_acc0", "MatMulNBits", 8, 32, 0),
    ("dynamic_quantize_matmul", "DynamicQuantizeMatMul", 8, 0, 0),  # the int8 precision's GEMM
]


def product_graph(operator: str, bits: int, block: int, accuracy: int, k: int, n: int) -> bytes:
    """A one-operator ONNX model ``y = x @ W`` (x: (tokens, k) float32) with random weights in the given form."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if operator == "MatMulNBits":
        codes = rng.integers(0, 256, (n, k // block, block * bits // 8), dtype=np.uint8)
        scales = (rng.random(n * (k // block), dtype=np.float32) * 0.01)
        node = helper.make_node(operator, ["x", "B", "S"], ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                                block_size=block, accuracy_level=accuracy)
    else:
        codes = rng.integers(-127, 128, (k, n), dtype=np.int8)
        scales = rng.random(n, dtype=np.float32) * 0.01
        node = helper.make_node(operator, ["x", "B", "S"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "product", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, n])],
                              initializer=[numpy_helper.from_array(codes, "B"), numpy_helper.from_array(scales, "S")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    return model.SerializeToString()


def layer_estimate_us(per_shape_us: dict[str, float]) -> float:
    """One MiniLM layer's products: query, key, value and the attention output (four 384 -> 384), two feed-forward."""
    return 4 * per_shape_us["attention"] + per_shape_us["intermediate"] + per_shape_us["output"]


def time_form(operator: str, bits: int, block: int, accuracy: int, tokens: int, calls: int) -> dict[str, float]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    out = {}
    for shape, (k, n) in SHAPES.items():
        session = onnxruntime.InferenceSession(product_graph(operator, bits, block, accuracy, k, n), options,
                                               providers=["CPUExecutionProvider"])
        x = np.random.default_rng(1).standard_normal((tokens, k)).astype(np.float32)
        for _ in range(calls // 5):
            session.run(None, {"x": x})
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            session.run(None, {"x": x})
            times.append(time.perf_counter() - started)
        out[shape] = statistics.median(times) * 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=12, help="a short caption's tokens, [CLS] and [SEP] included")
    parser.add_argument("--calls", type=int, default=300, help="timed calls per shape and form")
    parser.add_argument("--out", default=OUT)
    args = parser.parse_args(argv)
    import onnxruntime

    forms: dict[str, Any] = {}
    for name, operator, bits, block, accuracy in FORMS:
        per_shape = time_form(operator, bits, block, accuracy, args.tokens, args.calls)
        forms[name] = {"median_us": per_shape, "layer_us": layer_estimate_us(per_shape),
                       "six_layers_ms": 6 * layer_estimate_us(per_shape) / 1000}
        print(f"{name:26s} layer {forms[name]['layer_us']:7.1f} us", flush=True)
    base = forms["nbits8_block32_acc4"]["layer_us"]
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "onnxruntime": onnxruntime.__version__, "tokens": args.tokens,
              "threads": 1, "forms": forms,
              "layer_time_relative_to_int8_block32": {name: row["layer_us"] / base for name, row in forms.items()}}
    write_results(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
