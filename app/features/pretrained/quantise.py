"""speech_embedding's convolution stack with 8-bit integer products: the opt-in fast CPU path.

    python -m app.features.pretrained.quantise      # writes embedding_convs_int8.onnx beside the float graph

Why: on this project's CPUs (AVX-512 VNNI) onnxruntime's integer convolutions run the stack ~2x faster
for one 1 s query window and ~3x faster per window in ingest batches (bench/results/audio_frontend_int8.json).
What it costs: answers move a little. On the generalisation sets MAP moves by at most 0.004, but
top-10 overlap with the float path is 0.82-0.89, under the 0.90 that issue 35's rule asks of a default.
So it stays opt-in (settings ``encoders.audio_frontend_precision``).

How: onnxruntime's static quantisation, QDQ format, weights per output channel (int8), activations
uint8 with MinMax ranges calibrated on the shipped demo media (app/assets/demo, every 1 s window of its
words and sounds, padded as the speech head pads them), so the command needs nothing outside the
checkout. The first two convolutions stay float: they see the mel frames directly, and keeping them
took the centred frame cosine to the float graph from 0.95 to 0.98 at almost no cost in speed (three,
seven or eleven float layers gave no more).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from app.features.pretrained.ort_convs import GRAPH_INT8, graph_path

FLOAT_CONVS = 2  # how many of the first convolutions stay float (see the docstring)
PAD_S = 0.4  # the speech head's padding (general-audio's speech features: speech-embedding:0.4)
DEMO = Path(__file__).resolve().parents[2] / "assets" / "demo"


def calibration_mels(demo: Path = DEMO) -> list[np.ndarray]:
    """(1, frames, 32) log-mel inputs of the convolution stack: every 1 s window of the demo words and sounds."""
    import soundfile
    import soxr
    import torch

    from app.features.pretrained.speech_embedding import SAMPLE_RATE, load

    logmel = load().logmel
    pad = int(PAD_S * SAMPLE_RATE) // 2
    mels = []
    for path in sorted(p for folder in ("words", "sounds") for p in (demo / folder).iterdir()):
        wave, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
        wave = np.ascontiguousarray(soxr.resample(wave.mean(axis=1), rate, SAMPLE_RATE), np.float32)
        for start in range(0, max(1, len(wave) - SAMPLE_RATE + 1), SAMPLE_RATE):
            window = np.zeros(SAMPLE_RATE + 2 * pad, np.float32)
            piece = wave[start:start + SAMPLE_RATE]
            window[pad:pad + len(piece)] = piece
            with torch.no_grad():
                mels.append(logmel(torch.from_numpy(window)[None]).numpy())
    return mels


def quantise(float_graph: Path, out: Path, mels: list[np.ndarray]) -> Path:
    """Write the int8 graph of ``float_graph`` to ``out`` (renamed into place)."""
    import onnx
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)

    class Mels(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = iter(mels)

        def get_next(self) -> dict[str, np.ndarray] | None:
            mel = next(self.left, None)
            return None if mel is None else {"mel": mel}

    convs = [node.name for node in onnx.load(str(float_graph)).graph.node if node.op_type == "Conv"]
    partial = out.with_name(out.name + ".tmp")
    quantize_static(str(float_graph), str(partial), Mels(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=convs[:FLOAT_CONVS])
    os.replace(partial, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.features.pretrained.quantise")
    parser.add_argument("--out", help=f"where to write the int8 graph (default: beside the float one, {GRAPH_INT8})")
    args = parser.parse_args(argv)
    float_graph = graph_path("float32")
    out = Path(args.out) if args.out else float_graph.with_name(GRAPH_INT8)
    print(f"int8 convolutions -> {quantise(float_graph, out, calibration_mels())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
