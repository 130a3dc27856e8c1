"""bench.latency.drift's summary: samples grouped into windows, each target's share of windows met, the p50 spread."""

from __future__ import annotations

import numpy as np
import pytest

from bench.latency.drift import summarise


def test_windows_group_samples_by_time_and_report_each_cases_percentiles() -> None:
    samples = [(0.5, "wav", 9.0), (1.0, "text", 7.0), (2.0, "wav", 11.0), (3.0, "text", 9.0),  # window 0
               (10.1, "wav", 12.0), (11.0, "text", 6.0), (12.0, "wav", 14.0), (15.0, "wav", 13.0)]  # window 1
    out = summarise(samples, 10.0, targets=(("wav", "p50_ms", 10.0), ("text", "p50_ms", 8.0)))
    first, second = out["windows"]
    assert (first["window"], second["window"]) == (0, 1)
    assert first["wav"] == {"n": 2, "p50_ms": 10.0, "p99_ms": pytest.approx(np.percentile([9.0, 11.0], 99))}
    assert first["text"]["p50_ms"] == 8.0 and second["text"] == {"n": 1, "p50_ms": 6.0, "p99_ms": 6.0}
    assert second["wav"]["n"] == 3 and second["wav"]["p50_ms"] == 13.0
    # wav: 10.0 (met, the limit is inclusive) and 13.0 (missed); text: 8.0 and 6.0 (both met)
    assert out["share_of_windows_met"] == {"wav p50_ms <= 10": 0.5, "text p50_ms <= 8": 1.0}
    assert out["p50_spread"]["wav"] == {"median_p50_ms": 11.5, "min_p50_ms": 10.0, "max_p50_ms": 13.0}
    # over all samples, whichever window they fell in: wav 9, 11, 12, 13, 14
    assert out["overall"]["wav"]["n"] == 5 and out["overall"]["wav"]["p50_ms"] == 12.0


def test_a_window_missing_a_case_is_left_out_rather_than_judged_on_the_other_alone() -> None:
    samples = [(0.0, "wav", 5.0), (0.1, "text", 5.0), (10.0, "wav", 50.0)]  # window 1 has no text sample
    out = summarise(samples, 10.0, targets=(("wav", "p50_ms", 10.0),))
    assert [w["window"] for w in out["windows"]] == [0]
    assert out["share_of_windows_met"] == {"wav p50_ms <= 10": 1.0}


def test_no_complete_window_gives_no_shares_and_no_spread() -> None:
    out = summarise([(0.0, "wav", 5.0), (12.0, "text", 5.0)], 10.0, targets=(("wav", "p50_ms", 10.0),))
    assert out["windows"] == [] and out["share_of_windows_met"] == {"wav p50_ms <= 10": None} and out["p50_spread"] == {}
