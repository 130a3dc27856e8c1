"""bench.service.query_path_ab's pure parts: variant parsing and the per-variant medians the report compares."""

import argparse

import pytest

from bench.service.query_path_ab import CONCURRENCY, KEYS, medians, parse_variant


def test_variants_parse_with_and_without_the_plain_stack():
    assert parse_variant("after=.") == ("after", ".", False)
    assert parse_variant("before=dbf9c42:plain") == ("before", "dbf9c42", True)
    assert parse_variant("x=/tmp/tree:plain") == ("x", "/tmp/tree", True)
    for bad in ("after", "=.", "after="):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_variant(bad)


def _round(variant, qps, p50):
    row = {k: 0.0 for k in KEYS}
    return {"variant": variant, **{str(c): {**row, "queries_per_s": qps * c, "p50_ms": p50 + c} for c in CONCURRENCY}}


def test_medians_take_each_variant_over_its_own_rounds_only():
    rounds = [_round("a", 10, 5), _round("b", 100, 50), _round("a", 30, 1), _round("a", 20, 9), _round("b", 300, 70)]
    a, b = medians(rounds, "a"), medians(rounds, "b")
    assert a["1"]["queries_per_s"] == 20 and a["16"]["queries_per_s"] == 320  # median of 10, 20, 30 (x clients)
    assert a["4"]["p50_ms"] == 5 + 4
    assert b["1"]["queries_per_s"] == 200  # two rounds: the mean of the middle pair


def test_medians_include_the_text_phase_only_when_every_round_measured_it():
    from bench.service.query_path_ab import TEXT

    with_text = [{**_round("a", 10, 5), TEXT: {**{k: 0.0 for k in KEYS}, "p50_ms": p50}} for p50 in (20.0, 30.0, 25.0)]
    assert medians(with_text, "a")[TEXT]["p50_ms"] == 25.0
    assert TEXT not in medians(with_text[:2] + [_round("a", 10, 5)], "a")  # one round without it: no text median
