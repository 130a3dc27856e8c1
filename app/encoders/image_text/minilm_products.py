"""The products of MiniLM's onnxruntime query graphs (app/encoders/image_text/minilm_int8.py): each kind of
linear layer as the ONNX operators it exports to, and the rounding its weights get once at load.

Kinds (``PRODUCTS``, named by ``minilm_int8.VARIANTS``): ``tensor`` (int8, each input rounded with one scale
for the whole tensor: onnxruntime's dynamic quantisation), ``token`` (int8, each token's input on its own
uint8 grid), ``block32`` / ``block64`` (one fused MatMulNBits operator, 8-bit weights and inputs with one
scale per 32 / 64 values) and ``float`` (float32). Each module's eager ``forward`` only gives torch's
exporter its shapes; ``symbolic`` writes what onnxruntime runs.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import torch
from torch import nn


class Int8Product(torch.autograd.Function):
    """``x @ weight.T + bias`` with ``weight`` in int8 rows and ``x`` quantised at run time.

    Only the exporter calls this: ``symbolic`` writes the ONNX operators onnxruntime runs
    (it fuses them into DynamicQuantizeMatMul / MatMulIntegerToFloat). The eager ``forward``
    is the float product with the dequantised weight, which gives the exporter its shapes.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight_t: torch.Tensor, zero: torch.Tensor, scale: torch.Tensor,
                bias: torch.Tensor) -> torch.Tensor:
        return x @ (weight_t.float() * scale) + bias

    @staticmethod
    def symbolic(g: Any, x: Any, weight_t: Any, zero: Any, scale: Any, bias: Any) -> Any:
        x_q, x_scale, x_zero = g.op("DynamicQuantizeLinear", x, outputs=3)
        product = g.op("Cast", g.op("MatMulInteger", x_q, weight_t, x_zero, zero), to_i=1)  # 1: float32
        return g.op("Add", g.op("Mul", product, g.op("Mul", x_scale, scale)), bias)


def quantise_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 rows, float32 scale per row): ``weight ~= rows * scale[:, None]``, symmetric, |rows| <= 127."""
    weight = weight.detach().float()
    scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0
    rows = torch.clamp(torch.round(weight / scale[:, None]), -127, 127).to(torch.int8)
    return rows, scale


class TokenProduct(Int8Product):
    """``x @ weight.T + bias`` with ``x`` rounded to uint8 with one step and zero point per token (row).

    onnxruntime's MatMulInteger takes one zero point for the whole input, so the product runs with zero
    point 0 and each row's ``zero * column sums of the int8 rows`` is subtracted afterwards, in int32
    (exact). Zero is on every row's grid (the range is widened to include it), as in DynamicQuantizeLinear.
    The eager ``forward`` (the exporter's shapes) is :class:`Int8Product`'s: only the operators differ.
    """

    @staticmethod
    def symbolic(g: Any, x: Any, weight_t: Any, column_sums: Any, scale: Any, bias: Any) -> Any:
        def const(value: float) -> Any:
            return g.op("Constant", value_t=torch.tensor(value))

        low = g.op("Min", g.op("ReduceMin", x, axes_i=[-1], keepdims_i=1), const(0.0))
        high = g.op("Max", g.op("ReduceMax", x, axes_i=[-1], keepdims_i=1), const(0.0))
        step = g.op("Max", g.op("Div", g.op("Sub", high, low), const(255.0)), const(1e-12))  # (n, length, 1)
        zero = g.op("Round", g.op("Div", g.op("Neg", low), step))
        rounded = g.op("Clip", g.op("Add", g.op("Round", g.op("Div", x, step)), zero), const(0.0), const(255.0))
        product = g.op("MatMulInteger", g.op("Cast", rounded, to_i=2), weight_t)  # 2: uint8; int32 out
        product = g.op("Sub", product, g.op("Mul", g.op("Cast", zero, to_i=6), column_sums))  # 6: int32
        return g.op("Add", g.op("Mul", g.op("Cast", product, to_i=1), g.op("Mul", step, scale)), bias)


# Weights (and, in the kernel, input values) per scale in a block product (onnxruntime's MatMulNBits takes 16-256).
# Measured on 800 generated captions (one thread, cosine to float32 mean / min): 32: 3.03 ms, 0.99966 / 0.99937;
# 64: 2.62 ms, 0.99951 / 0.99925; 128: 2.42 ms, 0.99915 / 0.99863; int8_token 3.6 ms, 0.99945 / 0.99900.
# 32 (int8_block32) met issue 35's rule and is the default; 64 (int8_block64), the widest block still closer to
# float32 than int8_token, missed it against half by one caption on the held-out photos and is opt-in.
BLOCKS = {"block32": 32, "block64": 64}


def quantise_blocks(weight: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 codes (out, in / block, block), float32 scales (out, in / block)): ``weight ~= (codes - 128) * scale``
    for every ``block`` consecutive inputs of each output unit; symmetric, |codes - 128| <= 127."""
    weight = weight.detach().float()
    out, inputs = weight.shape
    if inputs % block:
        raise ValueError(f"a block product needs inputs in multiples of {block}, got {inputs}")
    blocks = weight.reshape(out, inputs // block, block)
    scale = blocks.abs().amax(dim=2).clamp(min=1e-12) / 127.0
    codes = torch.clamp(torch.round(blocks / scale[..., None]), -127, 127) + 128
    return codes.to(torch.uint8), scale


class BlockProduct(torch.autograd.Function):
    """``x @ weight.T + bias`` as one onnxruntime operator, MatMulNBits with 8-bit codes: every block of
    32 or 64 (``BLOCKS``) weights of a row share a scale, and at ``accuracy_level`` 4 the kernel rounds
    each token's input to int8 per block of the same width itself, multiplying with VNNI; the bias is one
    Add after it.

    Why (issue 35): ``int8_token`` rounds per token in ~15 small ONNX operators per product, and
    onnxruntime spent more of a query's time running those operators than multiplying; one fused
    operator per product does the rounding (finer: per block, not per token) inside the kernel.
    The eager ``forward`` (the exporter's shapes) is the float product with the dequantised weight.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, codes: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        weight = (codes.float() - 128.0) * scale[..., None]
        return x @ weight.reshape(weight.shape[0], -1).T + bias

    @staticmethod
    def symbolic(g: Any, x: Any, codes: Any, scale: Any, bias: Any) -> Any:
        out, blocks, block = codes.type().sizes()
        product = g.op("com.microsoft::MatMulNBits", x, codes, scale, K_i=blocks * block, N_i=out, bits_i=8,
                       block_size_i=block, accuracy_level_i=4)
        return g.op("Add", product, bias)


def token_rounding_reference(x: np.ndarray) -> np.ndarray:
    """What :class:`TokenProduct` multiplies instead of ``x``: each row on its own uint8 grid, in float64."""
    x = x.astype(np.float64)
    low = np.minimum(x.min(-1, keepdims=True), 0.0)
    high = np.maximum(x.max(-1, keepdims=True), 0.0)
    step = np.maximum((high - low) / 255.0, 1e-12)
    zero = np.round(-low / step)
    return (np.clip(np.round(x / step) + zero, 0, 255) - zero) * step


class Int8TokenLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        rows, scale = quantise_rows(weight)
        self.register_buffer("weight_t", rows.T.contiguous())
        self.register_buffer("column_sums", rows.to(torch.int32).sum(1))  # per output unit
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return TokenProduct.apply(x, self.weight_t, self.column_sums, self.scale, self.bias)


class BlockLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, block: int) -> None:
        super().__init__()
        codes, scale = quantise_blocks(weight, block)
        self.register_buffer("codes", codes)
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return BlockProduct.apply(x, self.codes, self.scale, self.bias)


class FloatLinear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weight_t", weight.detach().float().T.contiguous())
        self.register_buffer("bias", bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight_t + self.bias


class Int8Linear(nn.Module):
    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        rows, scale = quantise_rows(weight)
        self.register_buffer("weight_t", rows.T.contiguous())  # MatMulInteger's B is (in, out)
        self.register_buffer("zero", torch.zeros(rows.shape[0], dtype=torch.int8))  # symmetric: zero point 0
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias.detach().float().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Int8Product.apply(x, self.weight_t, self.zero, self.scale, self.bias)


PRODUCTS: dict[str, Callable[[torch.Tensor, torch.Tensor], nn.Module]] = {
    "tensor": Int8Linear, "token": Int8TokenLinear, "float": FloatLinear,
    **{kind: functools.partial(BlockLinear, block=block) for kind, block in BLOCKS.items()},
}
