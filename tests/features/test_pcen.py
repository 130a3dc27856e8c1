"""PCEN against the recursion written out in numpy, and the behaviour it exists for."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from app.features.pcen import Pcen, smoothing_coefficient, smoothing_matrix


def numpy_pcen(log_mel: np.ndarray, s: float, alpha: float = 0.98, delta: float = 2.0, r: float = 0.5) -> np.ndarray:
    """The paper's recursion frame by frame: M[t] = (1 - s) M[t-1] + s E[t], M[0] = E[0]."""
    power = np.exp(log_mel)
    smooth = np.empty_like(power)
    smooth[:, 0] = power[:, 0]
    for t in range(1, power.shape[1]):
        smooth[:, t] = (1 - s) * smooth[:, t - 1] + s * power[:, t]
    return (power / (1e-6 + smooth) ** alpha + delta) ** r - delta**r


def test_the_smoothing_coefficient_is_librosas() -> None:
    # t = 0.4 s at 100 frames/s = 40 frames: s = (sqrt(1 + 4 * 1600) - 1) / (2 * 1600)
    assert smoothing_coefficient(0.4, 100.0) == pytest.approx((math.sqrt(6401) - 1) / 3200)
    assert smoothing_coefficient(0.4, 100.0) == pytest.approx(0.02469, abs=1e-5)


def test_the_matrix_form_equals_the_recursion() -> None:
    rng = np.random.default_rng(0)
    log_mel = rng.normal(0.0, 2.0, (3, 57, 8))
    got = Pcen(frames_per_s=100.0)(torch.from_numpy(log_mel)).numpy()
    np.testing.assert_allclose(got, numpy_pcen(log_mel, smoothing_coefficient(0.4, 100.0)), rtol=1e-10, atol=1e-12)
    # float32 (what the service runs) stays close to the float64 reference
    got32 = Pcen(frames_per_s=100.0)(torch.from_numpy(log_mel).float()).numpy()
    np.testing.assert_allclose(got32, numpy_pcen(log_mel, smoothing_coefficient(0.4, 100.0)), rtol=1e-4, atol=1e-5)


def test_each_row_of_the_smoothing_matrix_sums_to_one() -> None:
    """A constant input must come out unchanged: the running average of a constant is the constant."""
    matrix = smoothing_matrix(200, 0.05, torch.float64)
    np.testing.assert_allclose(matrix.sum(1).numpy(), 1.0, rtol=1e-12)
    assert torch.all(torch.triu(matrix, 1) == 0)  # no frame looks ahead


def test_level_cancels_and_onsets_stand_out() -> None:
    """40 dB more gain moves log-mel by log(1e4) = 9.2 in every frame but PCEN of a steady sound
    by only a few percent; a step up in level is a peak in PCEN that decays as the average catches up."""
    rng = np.random.default_rng(1)
    steady = rng.normal(0.0, 0.1, (1, 300, 4))  # a steady noise-like log-power
    pcen = Pcen(frames_per_s=100.0)
    quiet = pcen(torch.from_numpy(steady))[0, 100:].mean().item()
    loud = pcen(torch.from_numpy(steady + math.log(1e4)))[0, 100:].mean().item()
    assert abs(loud - quiet) / quiet < 0.25  # log-mel itself moved by 9.2 on a scale of ~0.1

    step = np.zeros((1, 300, 1))
    step[0, 150:] = math.log(100.0)  # 20 dB louder from frame 150 on
    out = pcen(torch.from_numpy(step))[0, :, 0].numpy()
    assert out[150] > 3 * out[140]  # the onset
    assert out[150] > out[200] > out[299]  # and its decay towards the new steady state


def test_a_bad_time_constant_is_refused() -> None:
    with pytest.raises(ValueError, match="time_constant_s"):
        Pcen(frames_per_s=100.0, time_constant_s=0.0)
