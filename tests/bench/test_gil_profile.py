"""bench.service.gil_profile's pure part: the per-variant medians its README figures come from."""


def test_gil_profile_medians_take_each_round_of_a_variant():
    from bench.service.gil_profile import _medians

    rows = [{"gil_held_ms_per_query": g, "load": {"queries_per_s": q, "p50_ms": p, "server_cpu_ms_per_query": c}}
            for g, q, p, c in ((3.0, 100, 9, 8), (5.0, 140, 7, 10), (4.0, 120, 8, 9))]
    assert _medians(rows) == {"gil_held_ms_per_query": 4.0, "queries_per_s": 120, "p50_ms": 8, "server_cpu_ms_per_query": 9}
