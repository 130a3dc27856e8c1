"""The index benchmark runs end to end on tiny sizes and writes every field it promises."""

from __future__ import annotations

import json
from pathlib import Path

from bench.index.index import main


def test_bench_index_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "index.json"
    result = main(["--rows", "20000", "--compare-rows", "5000", "--repeats", "2", "--bandwidth-mb", "64", "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    large = result["binary_large"]
    for key in ("one_query_ratio_to_bound", "shared_scan_throughput_gain", "speedup_vs_faiss_default"):
        assert large[key] > 0
    assert result["binary_vs_float"]["float_over_binary_one_query"] > 0
    assert result["memory_bandwidth"]["2_threads"]["median_gb_s"] > 0
