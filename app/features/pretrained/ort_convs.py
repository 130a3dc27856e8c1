"""speech_embedding's convolution stack on CPU through onnxruntime, as a torch operator.

Why: the stack is twenty small convolutions (24 to 96 channels) over a 1.4 s window's mel frames; on
this project's CPUs onnxruntime runs them 2.1x faster than torch's oneDNN path (4.8 -> 2.3 ms for one
window, 6.5 -> 3.1 ms per window in batches of 32, one thread each; same machine, same run), which is
what brings a 1 s query's model time under 5 ms. The graph is this project's own export of
:class:`~app.features.pretrained.speech_embedding.EmbeddingNet` (time axis dynamic, so one pass gives
every 80 ms frame), written by ``python -m app.features.pretrained.convert`` beside the weights and
checked against the torch module in the tests; CUDA keeps the torch module.

It is registered as a torch custom operator so that the encoders' TorchScript traces
(app/encoders/traced.py) record a call to it rather than its output on the example batch; the
session releases the GIL while it runs, as the traces do.

Precision: ``float32`` (the default) or ``int8``, the same stack with 8-bit integer products
(app/features/pretrained/quantise.py: ~2x faster, answers a little different, opt-in by issue 35's rule).
The service sets it at start from ``encoders.audio_frontend_precision``; the op reads it on every call,
so traced encoders follow it too.

Two changes of speed only, each the same frames bit for bit (tests/features/test_ort_blocked.py): the
session runs onnxruntime's optimised graph with its Clips kept on blocked tensors (ort_blocked.py), and
:func:`intra_op_threads` lets a caller run the stack on two onnxruntime threads (a lone query, whose
front-end is most of its time, routed_fusion.py) while torch's own count stays one.
"""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

log = logging.getLogger(__name__)

GRAPH = "embedding_convs.onnx"
GRAPH_INT8 = "embedding_convs_int8.onnx"  # written by python -m app.features.pretrained.quantise
PRECISIONS = ("float32", "int8")
_lock = threading.Lock()
_precision = "float32"
_blocked = True
_local = threading.local()  # intra_op_threads' setting, per calling thread


def set_precision(precision: str) -> None:
    """The process's precision for the stack on CPU (the service sets ``encoders.audio_frontend_precision``)."""
    global _precision
    if precision not in PRECISIONS:
        raise ValueError(f"audio front-end precision must be one of {PRECISIONS}, got {precision!r}")
    if precision == "int8" and not graph_path("int8").is_file():
        raise FileNotFoundError(f"{graph_path('int8')} is missing: run python -m app.features.pretrained.quantise")
    _precision = precision


def precision() -> str:
    return _precision


def graph_path(precision: str | None = None) -> Path:
    from app.features.pretrained._store import ASSETS

    return ASSETS / "speech-embedding" / (GRAPH_INT8 if (precision or _precision) == "int8" else GRAPH)


def available() -> bool:
    """onnxruntime is installed and the exported graph is there (else the torch module runs)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return graph_path("float32").is_file()


@lru_cache(maxsize=None)
def _session(threads: int, precision: str, blocked: bool = True):
    """The session for a thread budget and precision; ``blocked``: with the Clips on blocked tensors
    (app/features/pretrained/ort_blocked.py: the same numbers, ~8% faster), where that edit is exact."""
    import onnxruntime

    from app.features.pretrained.ort_blocked import blocked_session, differs

    def options() -> onnxruntime.SessionOptions:
        made = onnxruntime.SessionOptions()
        made.intra_op_num_threads = threads
        made.inter_op_num_threads = 1
        made.log_severity_level = 3  # the int8 graph's unused constants are a warning per session, not news
        if threads > 1:  # the pool's threads spin within a run, not after it: the next work on that core is ours
            made.add_session_config_entry("session.force_spinning_stop", "1")
        return made

    path = graph_path(precision)
    plain = onnxruntime.InferenceSession(str(path), options(), providers=["CPUExecutionProvider"])
    session = (blocked and blocked_session(path, options, plain)) or plain
    if threads > 1 and (problem := differs(session, _session(1, precision, blocked))):
        # onnxruntime splits each convolution's outputs between threads, so the sums should not change;
        # where they do, the one-thread session answers (the same codes whatever the thread budget)
        log.warning("speech_embedding's convolutions on %d threads: keeping one thread, %s", threads, problem)
        return _session(1, precision, blocked)
    return session


def set_blocked(on: bool) -> None:
    """Whether the op runs the graph with its Clips on blocked tensors (the default) or onnxruntime's own
    graph: the same numbers either way; the switch is for same-run A/B timing (bench.audio.window_cost)."""
    global _blocked
    _blocked = on


def prepare(thread_counts: tuple[int, ...]) -> None:
    """Build the sessions for these thread counts now (each ~0.3 s: the optimised graph, its edit and its
    check), so that a service pays at start, not in its first queries (a query runs on one thread, a lone
    query's front-end on two)."""
    for threads in thread_counts:
        with _lock:
            _session(threads, _precision, _blocked)


@contextmanager
def intra_op_threads(threads: int) -> Iterator[None]:
    """The op's onnxruntime threads on the calling thread while the block runs, instead of torch's count: a
    lone query's front-end on both cores (app/encoders/audio/routed_fusion.py). onnxruntime splits each
    convolution's output between its threads, so the frames are the same bit for bit (tests/features)."""
    before = getattr(_local, "threads", None)
    _local.threads = threads
    try:
        yield
    finally:
        _local.threads = before


@torch.library.custom_op("recall::speech_embedding_convs", mutates_args=())
def speech_embedding_convs(mel: torch.Tensor) -> torch.Tensor:
    """(B, frames >= 76, 32) float32 CPU mel -> (B, 1 + (frames - 76) // 8, 96)."""
    threads = getattr(_local, "threads", None) or max(1, torch.get_num_threads())
    with _lock:  # one session per thread budget, built once
        session = _session(threads, _precision, _blocked)
    out = session.run(None, {"mel": np.ascontiguousarray(mel.detach().numpy(), dtype=np.float32)})[0]
    return torch.from_numpy(out)


@speech_embedding_convs.register_fake
def _(mel: torch.Tensor) -> torch.Tensor:
    return mel.new_empty(mel.shape[0], 1 + (mel.shape[1] - 76) // 8, 96)


def export(net: torch.nn.Module, path: Path) -> None:
    """Write ``net`` (an EmbeddingNet in eval mode) as an ONNX graph with dynamic batch and time axes."""
    import warnings

    example = torch.zeros(2, 137, 32)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net.eval(), (example,), str(path), input_names=["mel"], output_names=["frames"],
                          dynamic_axes={"mel": {0: "batch", 1: "time"}, "frames": {0: "batch", 1: "embeddings"}},
                          opset_version=17, dynamo=False)
