"""Traced model steps (app/encoders/traced.py): used only where the trace is the same computation."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from app.encoders.traced import CpuTraces, TracedStep, trace_step


class Framed(torch.nn.Module):
    """Branches on shapes only: frames of 4 samples, weighted by a ramp made in numpy from the length
    (a constant in the trace, as the texture statistics' modulation bins are)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frames = x.reshape(x.shape[0], -1, 4)
        if frames.shape[1] < 2:
            raise ValueError("too short")
        ramp = torch.from_numpy(np.arange(int(x.shape[1]) // 4, dtype=np.float32))
        return frames.mean(2) * ramp, frames.amax(2)


class SignBranch(torch.nn.Module):
    """Branches on the data: a trace records one branch only."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (x * 2 if float(x.sum()) > 0 else x * 3,)


def _rows(batch: int, length: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((batch, length)).astype(np.float32))


def test_a_shape_only_module_is_traced_and_agrees_bit_for_bit_on_every_batch_size() -> None:
    module = Framed()
    step = trace_step(module, _rows(2, 16, 0), [_rows(1, 16, 1), _rows(3, 16, 2)], "framed")
    assert isinstance(step, TracedStep)
    for batch in (1, 2, 5, 64):
        x = _rows(batch, 16, batch)
        with torch.inference_mode():
            for got, want in zip(step(x), module(x)):
                assert torch.equal(got, want)


def test_another_input_length_runs_the_eager_module() -> None:
    module = Framed()
    step = trace_step(module, _rows(2, 16, 0), [_rows(1, 16, 1)], "framed")
    x = _rows(2, 32, 3)  # the trace baked a 4-frame ramp; 8 frames must not use it
    with pytest.raises(RuntimeError):
        step.traced(x)
    got, want = step(x), module(x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[0], x.reshape(2, 8, 4).mean(2) * torch.arange(8.0))


def test_a_data_dependent_branch_is_caught_and_the_module_runs_eagerly(caplog: pytest.LogCaptureFixture) -> None:
    module = SignBranch()
    positive, negative = torch.ones(1, 8), -torch.ones(1, 8)
    with caplog.at_level(logging.WARNING, logger="app.encoders.traced"):
        step = trace_step(module, positive, [negative], "sign branch")
    assert step is module
    assert "sign branch: running eagerly" in caplog.text
    assert torch.equal(step(negative)[0], -3 * torch.ones(1, 8))


def test_checks_of_another_length_are_refused_rather_than_trusted() -> None:
    module = Framed()
    assert trace_step(module, _rows(2, 16, 0), [_rows(2, 32, 1)], "framed") is module


@pytest.mark.parametrize("name", ["speech-attn-hash", "sounds-texture"])
def test_shipped_trained_encoders_run_traced_on_cpu_with_the_eager_answers(name: str) -> None:
    from app.encoders.registry import create_encoder, discover

    encoder = create_encoder(name, discover())
    rng = np.random.default_rng(4)
    windows = [(0.1 * rng.standard_normal(int(encoder.sample_rate * seconds))).astype(np.float32)
               for seconds in (0.4, 1.0, 2.5, 1.0)]  # shorter and longer than the window: fitted to it
    traced = encoder.encode(windows)
    assert isinstance(encoder.steps.built, TracedStep)
    steps = encoder.steps
    encoder.steps = CpuTraces(steps.eager, lambda: steps.eager)  # the same encoder, eager on CPU too
    eager = encoder.encode(windows)
    encoder.steps = steps
    np.testing.assert_array_equal(traced.floats, eager.floats)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    encoder.to("cpu")  # a move drops the trace (it holds the old device's tensors); the next batch traces again
    assert encoder.steps.built is None
    np.testing.assert_array_equal(encoder.encode(windows).codes, eager.codes)
    assert isinstance(encoder.steps.built, TracedStep)
