"""An ``onnx-audio`` folder whose model needs a custom operator, with the library that provides it.

The library (tests/encoders/custom_op/add_one.c: domain ``recall.test``, op ``AddOne``, x + 1) is
compiled here with the system C compiler; the model is built with the ``onnx`` package: waveform
(batch, 2000) -> MatMul by a fixed random (2000, 16) matrix -> AddOne -> (batch, 16). The +1 changes
the direction of every vector, so a folder that ran without the op (or with another) would not match
:func:`reference`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from tests.encoders.onnx_models import DIM, HOP_S, SAMPLE_RATE, WINDOW_S, write_manifest

SOURCE = Path(__file__).with_name("custom_op") / "add_one.c"
LIBRARY = "libaddone.so"
DOMAIN, OP = "recall.test", "AddOne"
SAMPLES = int(SAMPLE_RATE * WINDOW_S)


def weights() -> np.ndarray:
    return (np.random.default_rng(5).standard_normal((SAMPLES, DIM)) / np.sqrt(SAMPLES)).astype(np.float32)


def compile_library(path: Path) -> Path:
    subprocess.run([shutil.which("cc") or "cc", "-shared", "-fPIC", "-O1", "-o", str(path), str(SOURCE)], check=True)
    return path


def model(path: Path, domain: str = DOMAIN) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("MatMul", ["waveform", "w"], ["projected"]),
             helper.make_node(OP, ["projected"], ["embedding"], domain=domain)]
    graph = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("waveform", TensorProto.FLOAT, ["batch", SAMPLES])],
                              [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIM])],
                              initializer=[numpy_helper.from_array(weights(), "w")])
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)])
    built.ir_version = 8
    onnx.save(built, str(path))
    return path


def custom_op_folder(folder: Path, library: Path | None, *, name: str = "tiny-custom", domains: list[str] | None = None,
                     model_domain: str = DOMAIN) -> Path:
    """The folder; ``library`` copied in and named by ``custom_ops`` (None: the manifest names no custom ops)."""
    folder.mkdir(parents=True, exist_ok=True)
    model(folder / "audio.onnx", model_domain)
    manifest = {
        "format": "recall-encoder/1", "name": name, "family": "onnx-audio", "modality": "audio", "dim": DIM, "bits": DIM,
        "licence": "MIT", "source": "tests/encoders/custom_op_folder.py", "version": "1",
        "audio": {"model": "audio.onnx", "sample_rate": SAMPLE_RATE, "window_s": WINDOW_S, "hop_s": HOP_S},
    }
    if library is not None:
        shutil.copy(library, folder / LIBRARY)
        manifest["custom_ops"] = {"library": LIBRARY, "domains": domains or [DOMAIN]}
    return write_manifest(folder, manifest)


def reference(windows: np.ndarray) -> np.ndarray:
    """What the folder must embed: unit(x W + 1)."""
    out = windows.astype(np.float64) @ weights().astype(np.float64) + 1.0
    return out / np.linalg.norm(out, axis=1, keepdims=True)
