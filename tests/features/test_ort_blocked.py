"""speech_embedding's convolutions with their Clips on onnxruntime's blocked tensors (app/features/pretrained/ort_blocked.py).

The edit must change nothing but the speed: the same frames bit for bit as onnxruntime's own optimised graph, on
the demo's real words and sounds and through the default encoder's whole query path; and any edit that is not
exact must fall back to onnxruntime's graph.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr
import torch

from app.features.pretrained import onnx_wire, ort_blocked, ort_convs
from app.features.pretrained.ort_blocked import NCHWC, Node, clips_kept_blocked

DEMO = Path(__file__).resolve().parents[2] / "app" / "assets" / "demo"
CLIPS = sorted((DEMO / "words").glob("*.flac"))[:4] + sorted((DEMO / "sounds").glob("*.ogg"))[:3]


def clip(path: Path) -> np.ndarray:
    wave, sr = soundfile.read(str(path), dtype="float32", always_2d=True)
    return np.ascontiguousarray(soxr.resample(wave.mean(axis=1), sr, 16000), np.float32)


def plain_and_blocked():
    plain, blocked = ort_convs._session(1, "float32", False), ort_convs._session(1, "float32", True)
    return plain, blocked


def test_the_optimised_graph_has_clips_to_move_and_the_session_moves_them() -> None:
    """On this onnxruntime the optimiser leaves each Clip between a reorder pair; the op's session is the edited one."""
    plain, blocked = plain_and_blocked()
    nodes = ort_blocked._graph_nodes(ort_blocked.optimised_graph(ort_convs.graph_path("float32"), lambda: _options()))
    if not any(node.domain == NCHWC for node in nodes):
        pytest.skip("onnxruntime has no blocked layout on this CPU (x86 with AVX2 or AVX-512 only): nothing to move")
    edited, moved = clips_kept_blocked(nodes)
    assert moved == sum(node.op == "Clip" for node in nodes) == 19  # every convolution's floor but the last one's
    assert sum(node.op.startswith("Reorder") for node in edited) == 1  # only the final NCHWc -> NCHW remains
    assert blocked is not plain


def _options():
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return options


def test_blocked_frames_are_bit_identical_on_real_clips() -> None:
    plain, blocked = plain_and_blocked()
    from app.features.pretrained.speech_embedding import load

    frontend = load(onnx_on_cpu=False)
    for path in CLIPS:
        audio = clip(path)[:16000 * 3]
        with torch.inference_mode():  # one 1.4 s window (137 frames), and the whole clip at once
            mels = [frontend.logmel(torch.from_numpy(np.pad(audio[:22400], (0, max(0, 22400 - len(audio)))))[None]),
                    frontend.logmel(torch.from_numpy(audio)[None])]
        for mel in mels:
            feed = {"mel": mel.numpy()}
            assert np.array_equal(blocked.run(None, feed)[0], plain.run(None, feed)[0]), path.name


def test_the_default_encoder_answers_bit_for_bit_as_before(monkeypatch) -> None:
    """The switches the bench's A/B uses: the default encoder's floats and codes on real 1 s windows (a lone
    query and a batch) are the same with the blocked Clips and a lone query's front-end on two onnxruntime
    threads as with onnxruntime's own graph on one thread, the halves side by side (the code before)."""
    from app.encoders.audio import routed_fusion
    from app.encoders.registry import create_encoder, discover

    encoder = create_encoder("general-audio-commercial", discover())
    assert encoder.frontend_splits
    monkeypatch.setattr(routed_fusion, "spare_core", lambda: True)  # a lone query on a machine with a core to spare
    split = []
    both_cores = ort_convs.intra_op_threads

    def spy(threads):
        split.append(threads)
        return both_cores(threads)

    monkeypatch.setattr(ort_convs, "intra_op_threads", spy)
    windows = [clip(path)[:16000] for path in CLIPS]
    answers = {}
    try:
        for new in (False, True):
            ort_convs.set_blocked(new)
            monkeypatch.setattr(routed_fusion, "LONE_QUERY_FRONTEND", "both_cores" if new else "one_core")
            answers[new] = [encoder.encode([w]) for w in windows] + [encoder.encode(windows[:2]), encoder.encode(windows)]
    finally:
        ort_convs.set_blocked(True)
    assert split == [2] * (len(windows) + 1)  # each lone window and the pair, not the batch of seven
    for old, new in zip(answers[False], answers[True]):
        assert np.array_equal(old.floats, new.floats) and np.array_equal(old.codes, new.codes)


def test_two_onnxruntime_threads_give_the_same_frames() -> None:
    """onnxruntime splits each convolution's output between its threads: the sums are the same, bit for bit."""
    from app.features.pretrained.speech_embedding import load

    frontend = load(onnx_on_cpu=True)
    wave = torch.from_numpy(np.stack([np.pad(clip(path)[:22400], (0, max(0, 22400 - len(clip(path)))))
                                      for path in CLIPS]))
    with torch.inference_mode():
        one = [frontend(wave[:1]), frontend(wave)]
        with ort_convs.intra_op_threads(2):
            two = [frontend(wave[:1]), frontend(wave)]
    assert ort_convs._session(2, "float32", True) is not ort_convs._session(1, "float32", True)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


def test_protobuf_round_trip_changes_no_answer() -> None:
    """Nodes parsed and written back (no edit) give a graph that loads and answers as the original."""
    import onnxruntime

    model = Path(ort_convs.graph_path("float32")).read_bytes()
    nodes = ort_blocked._graph_nodes(model)
    assert [n.op for n in nodes][:3] == ["Constant", "Unsqueeze", "Conv"]
    again = ort_blocked._with_nodes(model, nodes)
    a = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    b = onnxruntime.InferenceSession(again, providers=["CPUExecutionProvider"])
    for mel in ort_blocked.check_inputs():
        assert np.array_equal(a.run(None, {"mel": mel})[0], b.run(None, {"mel": mel})[0])


def test_the_edit_rewires_only_the_patterns_it_knows() -> None:
    conv = Node("Conv", NCHWC, ["x", "w"], ["c"])
    to_plain = Node("ReorderOutput", NCHWC, ["c"], ["c_plain"])
    clip1 = Node("Clip", "", ["c_plain", "lo", ""], ["k"])
    to_blocked = Node("ReorderInput", NCHWC, ["k"], ["k_blocked"])
    conv2 = Node("Conv", NCHWC, ["k_blocked", "w2"], ["d"])
    to_plain2 = Node("ReorderOutput", NCHWC, ["d"], ["d_plain"])
    clip2 = Node("Clip", "", ["d_plain", "lo", ""], ["m"])
    pool = Node("MaxPool", "", ["m"], ["p"])
    to_blocked2 = Node("ReorderInput", NCHWC, ["p"], ["p_blocked"])
    conv3 = Node("Conv", NCHWC, ["p_blocked", "w3"], ["e"])
    to_plain3 = Node("ReorderOutput", NCHWC, ["e"], ["e_plain"])
    clip3 = Node("Clip", "", ["e_plain", "lo", ""], ["out"])  # a graph output: no reorder after it, left alone
    nodes, moved = clips_kept_blocked([conv, to_plain, clip1, to_blocked, conv2, to_plain2, clip2, pool,
                                       to_blocked2, conv3, to_plain3, clip3])
    assert moved == 2
    assert [n.op for n in nodes] == ["Conv", "Clip", "Conv", "Clip", "MaxPool", "Conv", "ReorderOutput", "Clip"]
    assert (clip1.inputs[0], clip1.outputs[0]) == ("c", "k_blocked")  # the next Conv's input name is kept
    assert clip2.inputs[0] == "d" and (pool.domain, pool.inputs[0], pool.outputs[0]) == (NCHWC, "m", "p_blocked")
    assert clip3.inputs[0] == "e_plain"


def test_an_edit_that_is_not_exact_keeps_onnxruntimes_graph(monkeypatch, caplog) -> None:
    """Drop every Clip instead of moving it: the check inputs catch the change and the caller gets None."""
    plain, _ = plain_and_blocked()

    def wrong(nodes):
        edited, moved = clips_kept_blocked(nodes)
        for node in edited:
            if node.op == "Clip":
                node.op = "Identity"
                del node.inputs[1:]
        return edited, moved

    monkeypatch.setattr(ort_blocked, "clips_kept_blocked", wrong)
    with caplog.at_level(logging.WARNING, logger=ort_blocked.__name__):
        assert ort_blocked.blocked_session(ort_convs.graph_path("float32"), _options, plain) is None
    assert "not exact" in caplog.text


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**21 + 5])
def test_varints_round_trip(value: int) -> None:
    encoded = onnx_wire.encode_varint(value)
    assert onnx_wire.varint(encoded + b"\x00", 0) == (value, len(encoded))


def test_a_thread_budget_that_changes_the_frames_falls_back_to_one_thread(monkeypatch, caplog) -> None:
    """The two-thread session is checked against the one-thread one when it is built; where they differ,
    the op answers with one thread, so a lone query's codes never depend on the cores it got."""
    one = ort_convs._session(1, "float32", True)
    monkeypatch.setattr(ort_blocked, "differs", lambda *args, **kwargs: "differs (made to, for the test)")
    with caplog.at_level(logging.WARNING, logger=ort_convs.__name__):
        assert ort_convs._session.__wrapped__(2, "float32", True) is one
    assert "keeping one thread" in caplog.text
