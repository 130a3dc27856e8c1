"""A model step run as a TorchScript trace, so that it runs without holding the GIL.

Why: an eager torch module takes the GIL back between every two operations to run the Python that
chains them. A lone audio query runs ``general-audio``'s two halves on two threads at once
(app/encoders/side_thread.py), and each of their ~100 small operations then waited for the other
thread's Python: side by side, the halves took 4.3 and 4.7 ms for 1.6 and 3.5 ms of work alone. A
traced module runs its whole graph in C++ with the GIL released, so the halves overlap for real:
one window 6.3 -> 4.8 ms (bench/results/query_path.md). With many queries in flight, the model
thread's GIL-free stretch also leaves the GIL to the threads doing HTTP and search (4 clients
72 -> 100 queries/s). Used by every trained audio encoder (app/encoders/audio/_trained_audio.py) and by
the fused default's halves and their join (app/encoders/audio/routed_fusion.py).

A trace records the operations one example ran, so it is only used where that is provably the
same computation: the step's input length is fixed (an encoder's window), its Python branches
depend only on shapes, and at build time the trace must give bit-identical outputs to the eager
module on the example and on other batch sizes. Any failure keeps the eager module.
"""

from __future__ import annotations

import logging
import threading
import warnings
from typing import Callable, Generic, Sequence, TypeVar

import torch

log = logging.getLogger(__name__)

Outputs = tuple[torch.Tensor, ...]
Step = Callable[..., Outputs]


class TracedStep:
    """Calls the trace for inputs of the traced length, the eager module for anything else."""

    def __init__(self, traced: Step, eager: Step, length: int) -> None:
        self.traced, self.eager, self.length = traced, eager, length

    def __call__(self, *inputs: torch.Tensor) -> Outputs:
        # shape-derived values (frame counts, modulation bins) are constants in the trace
        return self.traced(*inputs) if inputs[0].shape[-1] == self.length else self.eager(*inputs)


Inputs = torch.Tensor | tuple[torch.Tensor, ...]


def _identical(a: Outputs, b: Outputs) -> bool:
    return len(a) == len(b) and all(u.shape == v.shape and torch.equal(u, v) for u, v in zip(a, b))


def trace_step(module: torch.nn.Module, example: Inputs, checks: Sequence[Inputs], what: str) -> Step:
    """``module`` traced on ``example``, or ``module`` itself where the trace is not exact.

    ``example`` is the module's input, or the tuple of its inputs, each (batch, ...); the first
    input's last dimension (a window's length) must be the same in every call the trace answers.
    ``checks``: further inputs of that length (other batch sizes, other content) on which the
    trace must agree with the module bit for bit, each twice (TorchScript optimises a graph after
    its first runs).
    """
    module = module.eval()
    example_args = example if isinstance(example, tuple) else (example,)
    length = int(example_args[0].shape[-1])
    try:
        with torch.no_grad(), warnings.catch_warnings():
            # the tracer warns about every shape check it turns into a constant; the checks below decide
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(module, example_args, check_trace=False)
            for inputs in (example, *checks, *checks):
                args = inputs if isinstance(inputs, tuple) else (inputs,)
                if args[0].shape[-1] != length:
                    raise ValueError(f"check input of length {args[0].shape[-1]}, traced {length}")
                if not _identical(tuple(module(*args)), tuple(traced(*args))):
                    raise ValueError(f"the trace differs from the module on a batch of {args[0].shape[0]}")
    except Exception as exc:  # noqa: BLE001 - any failure keeps the eager path, which is always right
        log.warning("%s: running eagerly, the traced step was not exact: %s", what, exc)
        return module
    return TracedStep(traced, module, length)


S = TypeVar("S")


class CpuTraces(Generic[S]):
    """An encoder's steps: traced once, on the first CPU call (``build``), and eager on any other device.

    A device move must call :meth:`reset`: a trace holds the tensors of the device it was made on.
    """

    def __init__(self, eager: S, build: Callable[[], S]) -> None:
        self.eager, self._build = eager, build
        self._traced: S | None = None
        self._lock = threading.Lock()

    def get(self, device: str) -> S:
        if device != "cpu":
            return self.eager
        with self._lock:
            if self._traced is None:
                self._traced = self._build()
            return self._traced

    def reset(self) -> None:
        with self._lock:
            self._traced = None

    @property
    def built(self) -> S | None:
        """The traced steps, or None before the first CPU call (tests and warm-up checks read it)."""
        return self._traced
