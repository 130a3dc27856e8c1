"""bench.service.ingest_search_ab's pure parts: the answer comparison and the per-variant summary."""

import pytest

from bench.service.ingest_search_ab import VARIANTS, _same_answers, _summary


def hit(item: str, distance: float, start: float = 0.0) -> dict:
    return {"id": item, "rank": 1, "distance": distance, "segments": [{"start": start, "end": start + 1.0}]}


def test_answers_compare_ids_segments_and_distances_to_the_tolerance():
    base = [[hit("a", 0.25)], [hit("b", 0.5, 3.0)]]
    assert _same_answers(base, [[hit("a", 0.25 + 1e-7)], [hit("b", 0.5, 3.0)]], True)
    assert not _same_answers(base, [[hit("a", 0.26)], [hit("b", 0.5, 3.0)]], True)  # a distance moved
    assert not _same_answers(base, [[hit("a", 0.25)], [hit("b", 0.5, 4.0)]], True)  # another segment
    assert not _same_answers(base, [[hit("a", 0.25)]], True)  # an answer missing
    renamed = [[hit("x", 0.25)], [hit("y", 0.5, 3.0)]]
    assert not _same_answers(base, renamed, True) and _same_answers(base, renamed, False)  # fresh ids ignored


def test_summary_pools_turns_and_gives_the_real_time_factor_of_the_median_ingest():
    turns = [{"alone_ms": [10.0] * 10, "during_ms": [float(x) for x in range(1, 101)], "ingest_s": s,
              "server_cpu_s_during": 5.0, "indexed": 1, "non_200": []} for s in (10.0, 6.0, 8.0)]
    out = _summary(turns, 600.0)
    assert out["ingest_realtime_factor"] == pytest.approx(75.0)  # 600 s / the median 8 s
    assert out["search_during_ingest"]["n"] == 300 and out["search_alone"]["p50_ms"] == 10.0
    assert out["searches_per_ingest_second"] == pytest.approx(300 / 24.0)
    assert len(out["search_during_ingest_p99_per_turn_ms"]) == 3


def test_every_variant_sets_the_lane_explicitly():
    """A variant must stay what its name says when the service's defaults change."""
    assert all("RECALL_BATCHING__QUERY_LANE" in env for env in VARIANTS.values())
