"""speech_embedding's int8 convolution stack (app/features/pretrained/quantise.py), the opt-in fast CPU path.

The shipped graph must be what its recorded command writes, stay close to the float graph on real demo
windows (centred on the frames' mean, where the heads' information is: the raw frames share a large common
part, so their plain cosine says little), and be what the custom op runs when, and only when, it is chosen."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.features.pretrained import ort_convs
from app.features.pretrained.ort_convs import GRAPH_INT8
from app.features.pretrained.quantise import calibration_mels, quantise


@pytest.fixture(scope="module")
def mels() -> list[np.ndarray]:
    return calibration_mels()


def _run(precision: str, mel: np.ndarray) -> np.ndarray:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(ort_convs.graph_path(precision)), providers=["CPUExecutionProvider"])
    return session.run(None, {"mel": mel})[0]


def test_the_shipped_graph_is_what_the_recorded_command_writes(tmp_path, mels) -> None:
    shipped = ort_convs.graph_path("int8")
    assert shipped.name == GRAPH_INT8 and shipped.is_file()
    written = quantise(ort_convs.graph_path("float32"), tmp_path / GRAPH_INT8, mels)
    assert written.read_bytes() == shipped.read_bytes()


def test_int8_frames_stay_close_to_float_on_real_windows(mels) -> None:
    batch = np.concatenate(mels[::4])  # words and sounds, every fourth window
    exact, fast = _run("float32", batch).reshape(-1, 96), _run("int8", batch).reshape(-1, 96)
    assert not np.array_equal(exact, fast)  # it really is the other graph
    centred_exact, centred_fast = exact - exact.mean(0), fast - exact.mean(0)
    cosine = (centred_exact * centred_fast).sum(1) / (
        np.linalg.norm(centred_exact, axis=1) * np.linalg.norm(centred_fast, axis=1))
    assert cosine.mean() > 0.95 and cosine.min() > 0.6  # measured: 0.98 and 0.86 on the calibration windows


def test_the_op_follows_the_chosen_precision(mels) -> None:
    mel = torch.from_numpy(np.concatenate(mels[:3]))
    try:
        ort_convs.set_precision("int8")
        np.testing.assert_allclose(torch.ops.recall.speech_embedding_convs(mel).numpy(), _run("int8", mel.numpy()), atol=1e-5)
        ort_convs.set_precision("float32")
        np.testing.assert_allclose(torch.ops.recall.speech_embedding_convs(mel).numpy(), _run("float32", mel.numpy()), atol=1e-5)
    finally:
        ort_convs.set_precision("float32")
    with pytest.raises(ValueError, match="must be one of"):
        ort_convs.set_precision("int4")
    assert ort_convs.precision() == "float32"
