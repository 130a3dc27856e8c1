"""bench/index/float_offheap.py runs end to end on a tiny size: both float stores, the same answers, every field."""

from __future__ import annotations

import json
from pathlib import Path

from bench.index.float_offheap import main


def test_float_offheap_bench_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "float_offheap.json"
    result = main(["--sizes", "5000", "--queries", "6", "--work", str(tmp_path / "work"), "--out", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(result))
    block = result["blocks"][0]
    assert block["same_answers"] and block["stage1"]["kind"] == "ivf"
    memory, mapped = block["children"]
    assert mapped["heap_bytes"]["mmap"] < memory["heap_bytes"]["memory"] and mapped["file_bytes"]["mmap"] >= 5000 * 128 * 4
    assert {(r["stage1"], r["query_windows"]) for r in block["ratios_separate_processes"]} == {("ivf", 1), ("flat", 1), ("ivf", 10)}
    assert mapped["cold"]["p50_ms"] > 0 and mapped["rss_after_evict"]["RssAnon"] > 0
    assert 0 <= memory["recall_at_10_vs_exact_float"] <= 1
    assert not list((tmp_path / "work").iterdir())  # mapped files unlinked, the IVF removed
