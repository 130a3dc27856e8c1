"""bench/results/query_path.json -> the tables of bench/results/query_path.md (printed as Markdown).

The prose of the report is written by hand; these tables are generated so they cannot drift
from the measurements.

    python -m bench.service.query_path_report [bench/results/query_path.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parents[1] / "results" / "query_path.json"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def tables(result: dict[str, Any]) -> str:
    runs = result["runs"]
    labels = [label for label in ("before", "after") if label in runs]
    out = []
    out.append("| clients | " + " | ".join(f"{l} p50 / p99 ms | {l} q/s (x one client) | {l} server CPU ms/query" for l in labels) + " |")
    out.append("|---" * (1 + 3 * len(labels)) + "|")
    rows = {l: runs[l].get("audio_wav16k", []) for l in labels}
    for i, row in enumerate(rows[labels[-1]]):
        cells = []
        for l in labels:
            r = rows[l][i]
            cells += [f"{_f(r['p50_ms'])} / {_f(r['p99_ms'])}", f"{_f(r['queries_per_s'])} ({_f(r['ratio_to_one_client'], 2)}x)",
                      _f(r["server_cpu_ms_per_query"])]
        out.append(f"| {row['concurrency']} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("Server-side split of one query (p50 of the response's own `timings`, one client, ms):")
    out.append("")
    out.append("| | " + " | ".join(labels) + " |")
    out.append("|---" * (1 + len(labels)) + "|")
    keys = ["decode_ms", "encode_ms", "search_ms", "total_ms"]
    for key in keys:
        out.append(f"| {key} | " + " | ".join(_f(rows[l][0]["server_timings_p50_ms"].get(key), 2) for l in labels) + " |")
    out.append("| client-measured p50 | " + " | ".join(_f(rows[l][0]["p50_ms"], 2) for l in labels) + " |")
    out.append("")
    if all("profile_breakdown" in runs[l] for l in labels):
        out.append("Busy thread time per query by category (py-spy, one client; threads overlap, so the sum exceeds the latency):")
        out.append("")
        out.append("| category | " + " | ".join(f"{l} ms" for l in labels) + " |")
        out.append("|---" * (1 + len(labels)) + "|")
        cats: list[str] = []
        for l in labels:
            for c in runs[l]["profile_breakdown"]["thread_ms_per_query"]:
                if c not in cats:
                    cats.append(c)
        for c in cats:
            out.append(f"| {c} | " + " | ".join(_f(runs[l]["profile_breakdown"]["thread_ms_per_query"].get(c), 2) for l in labels) + " |")
        out.append("| **busy total** | " + " | ".join(_f(runs[l]["profile_breakdown"]["busy_total_ms_per_query"], 2) for l in labels) + " |")
        out.append("")
    out.append("Other query formats, one client (p50 / p99 ms; server decode_ms p50):")
    out.append("")
    out.append("| format | " + " | ".join(f"{l}" for l in labels) + " |")
    out.append("|---" * (1 + len(labels)) + "|")
    fmt_names = {"wav16k": "WAV 16 kHz mono (PCM fast path)"}
    first = rows[labels[-1]][0]
    out.append(f"| {fmt_names['wav16k']} | " + " | ".join(
        f"{_f(rows[l][0]['p50_ms'])} / {_f(rows[l][0]['p99_ms'])} (decode {_f(rows[l][0]['server_timings_p50_ms'].get('decode_ms'), 2)})" for l in labels) + " |")
    del first
    for fmt in runs[labels[-1]].get("formats", {}):
        out.append(f"| {fmt} | " + " | ".join(
            f"{_f(runs[l]['formats'][fmt]['p50_ms'])} / {_f(runs[l]['formats'][fmt]['p99_ms'])} "
            f"(decode {_f(runs[l]['formats'][fmt]['server_timings_p50_ms'].get('decode_ms'), 2)})" for l in labels) + " |")
    out.append("")
    if "text" in runs[labels[-1]]:
        out.append("Text-to-image at 10^5 images, one client, a new sentence each time (p50 / p99 ms; server encode / search / rerank p50; "
                   "server CPU ms per query):")
        out.append("")
        out.append("| query | " + " | ".join(labels) + " |")
        out.append("|---" * (1 + len(labels)) + "|")
        for kind in runs[labels[-1]]["text"]:
            cells = []
            for l in labels:
                t = runs[l]["text"][kind]
                s = t["server_timings_p50_ms"]
                cells.append(f"{_f(t['p50_ms'])} / {_f(t['p99_ms'])} ({_f(s.get('encode_ms'))} / {_f(s.get('search_ms'))} / {_f(s.get('rerank_ms'))}; "
                             f"CPU {_f(t.get('server_cpu_ms_per_query'))})")
            out.append(f"| {kind} | " + " | ".join(cells) + " |")
        out.append("")
    if "ingest_under_search" in runs[labels[-1]]:
        out.append("Search (one client) while a 10-minute recording is ingested (p50 / p99 ms, searches that overlapped the ingest):")
        out.append("")
        out.append("| | " + " | ".join(labels) + " |")
        out.append("|---" * (1 + len(labels)) + "|")
        for key, name in (("search_alone", "search alone"), ("search_during_ingest", "search during ingest")):
            out.append(f"| {name} | " + " | ".join(
                f"{_f(runs[l]['ingest_under_search'][key].get('p50_ms'))} / {_f(runs[l]['ingest_under_search'][key].get('p99_ms'))}"
                f" (n={runs[l]['ingest_under_search'][key].get('n')})" for l in labels) + " |")
        out.append("| ingest, x real time | " + " | ".join(_f(runs[l]["ingest_under_search"]["realtime_factor"], 0) for l in labels) + " |")
        out.append("")
    if "audio_wav16k_httpx_client" in runs[labels[-1]]:
        out.append("The same WAV queries from an httpx client (what a Python user runs; it costs ~2.4 ms of the two cores per request):")
        out.append("")
        out.append("| clients | " + " | ".join(f"{l} p50 / p99 ms, q/s" for l in labels) + " |")
        out.append("|---" * (1 + len(labels)) + "|")
        for i, row in enumerate(runs[labels[-1]]["audio_wav16k_httpx_client"]):
            out.append(f"| {row['concurrency']} | " + " | ".join(
                f"{_f(runs[l]['audio_wav16k_httpx_client'][i]['p50_ms'])} / {_f(runs[l]['audio_wav16k_httpx_client'][i]['p99_ms'])}, "
                f"{_f(runs[l]['audio_wav16k_httpx_client'][i]['queries_per_s'])}" for l in labels) + " |")
        out.append("")
    load = {l: runs[l].get("load_after") for l in labels}
    out.append("Load average after each server's run: " + ", ".join(f"{l} {_f(v['load_1m'], 1)} (1 min)" for l, v in load.items() if v)
               + f"; before the run {_f(result['machine']['load_before']['load_1m'], 1)}.")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0]) if argv else DEFAULT
    print(tables(json.loads(path.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
