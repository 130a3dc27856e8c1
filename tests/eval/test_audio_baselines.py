"""Training-free audio baselines: the DCT, the voiced span and the segment means against hand-computed values."""

from __future__ import annotations

import numpy as np
import scipy.fft

from app.eval.audio_baselines import dct_ii, logmel_mean_std, mfcc_levin, segment_means, voiced_span


def test_dct_rows_are_scipy_orthonormal_dct_ii() -> None:
    x = np.random.default_rng(0).standard_normal((5, 40)).astype(np.float32)
    expected = scipy.fft.dct(x, type=2, norm="ortho", axis=1)[:, :13]
    np.testing.assert_allclose(x @ dct_ii(40, 13).T, expected, rtol=1e-4, atol=1e-4)


def test_voiced_span_keeps_first_to_last_loud_frame() -> None:
    frames = np.full((10, 3), -20.0)
    frames[3, 1] = frames[6, 0] = 0.0  # loud frames 3 and 6; 30 dB = 6.9 in natural-log power
    frames[4] = -5.0  # within 30 dB of the peak but inside the span anyway
    span = voiced_span(frames)
    assert span.shape == (4, 3) and span[0, 1] == 0.0 and span[-1, 0] == 0.0
    # nothing loud enough besides one frame: the whole window is kept
    single = np.full((5, 2), -20.0)
    single[2] = 0.0
    assert voiced_span(single).shape == (5, 2)


def test_segment_means_average_equal_runs() -> None:
    frames = np.arange(10, dtype=float)[:, None]
    np.testing.assert_allclose(segment_means(frames, 5)[:, 0], [0.5, 2.5, 4.5, 6.5, 8.5])
    short = segment_means(np.arange(3, dtype=float)[:, None], 5)  # fewer frames than segments
    assert short.shape == (5, 1) and short[-1, 0] == 2.0


def test_baselines_give_standardised_fixed_width_rows() -> None:
    rng = np.random.default_rng(1)
    windows = [0.1 * rng.standard_normal(n).astype(np.float32) for n in (16000, 8000, 20000, 16000)]
    mfcc, logmel = mfcc_levin(windows), logmel_mean_std(windows)
    assert mfcc.shape == (4, 130) and logmel.shape == (4, 80)
    np.testing.assert_allclose(mfcc.mean(axis=0), 0, atol=1e-4)
    np.testing.assert_allclose(logmel.mean(axis=0), 0, atol=1e-4)
    # the same sound gives the same row, whatever else is in the set
    again = mfcc_levin([windows[0], windows[0] * 0.5, windows[2]])
    assert np.corrcoef(again[0], again[1])[0, 1] > 0.9
