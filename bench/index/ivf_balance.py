"""IVF list balance on realistic codes: FAISS' centroids as they come, refined, and with list lengths capped.

At 10^8 real-audio windows the largest inverted list held 120x the median (bench/results/scale.json), so the
queries that land in it scan far more codes than the rest: that is the p99. This bench measures, on the same
codes as bench/index/scale.py (a prefix of its real-audio set; queries are its held-out real windows), in one
process and one run:

* list sizes (median, p99, largest, empty lists) of each way of building the IVF;
* per nprobe: recall@10 (tie-tolerant, against exact flat search), codes scanned per query (p50 / p99 / max:
  the sum of the probed lists' sizes, what a query's time is proportional to, free of timing noise) and the
  timed p50 / p99 of one query at a time (under /tmp/recall-timing.lock, least disturbed of 3 passes).

Variants: ``faiss`` (k-means as FAISS trains it, no cap: what collections had), ``faiss_sample_256`` (the
same on 4x the training sample: 256 codes per list), ``refined`` (plus
:func:`app.index.ivf.refine_centroids`), ``capped_N`` (refined, lists capped at N x the mean by
:func:`app.index.ivf.capped_assignment`).

    nice -n 19 python -m bench.index.ivf_balance                 # 10^6 windows, 1024 lists (~5 minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.index.ivf import TRAIN_POINTS_PER_LIST
from bench.index import _audio_codes as audio_codes
from bench.index._measure import K, latencies, peak_rss_bytes, tie_tolerant_recall, timing_lock
from bench.output import write_results

OUT = Path(__file__).resolve().parents[1] / "results" / "ivf_balance.json"
NPROBES = [4, 6, 8, 12, 16, 24, 32]
TARGET_RECALL = 0.98  # the variants are compared at the cheapest nprobe reaching this
CAPS = [2.0, 4.0]
PASSES = 3


def list_stats(sizes: np.ndarray) -> dict[str, Any]:
    median = float(np.median(sizes))
    return {"median": median, "p99": float(np.percentile(sizes, 99)), "max": int(sizes.max()), "empty": int((sizes == 0).sum()),
            "max_over_median": float(sizes.max() / max(median, 1.0))}


def scanned(ivf: Any, queries: np.ndarray, nprobe: int) -> np.ndarray:
    """Codes each query reads at ``nprobe``: the sizes of the lists its probe visits."""
    _, probed = ivf._index.quantizer.search(queries, nprobe)
    return ivf.list_sizes()[probed].sum(axis=1)


def build(codes: np.ndarray, ids: np.ndarray, nlist: int, refine: bool, cap: float | None, points: int) -> tuple[Any, float]:
    from app.index import BinaryIVF

    t = time.perf_counter()
    ivf = BinaryIVF.train(codes, nlist, refine=refine, points_per_list=points)
    ivf.list_cap = cap
    for start in range(0, len(codes), 1 << 18):
        ivf.add(ids[start : start + (1 << 18)], codes[start : start + (1 << 18)])
    return ivf, time.perf_counter() - t


def measure(codes: np.ndarray, queries: np.ndarray, nlist: int, nprobes: list[int], caps: list[float],
            lock: bool = True, passes: int = PASSES, only: list[str] | None = None) -> dict[str, Any]:
    """Every variant over the same codes and queries; returns the JSON's body."""
    import faiss

    from app.index import BinaryIndex

    faiss.omp_set_num_threads(1)  # builds as the service's background build runs them
    ids = np.arange(len(codes), dtype=np.int64) * 3 + 7
    flat = BinaryIndex(codes.shape[1] * 8, shards=2)
    flat.reserve(len(codes))
    for start in range(0, len(codes), 1 << 20):  # in chunks: one add of 10^8 codes took the run to 16 GB peak RSS
        flat.add(ids[start : start + (1 << 20)], codes[start : start + (1 << 20)])
    true_d, _ = flat.search(queries, K)
    del flat
    variants = [("faiss", False, None, TRAIN_POINTS_PER_LIST), ("faiss_sample_256", False, None, 256),
                ("refined", True, None, TRAIN_POINTS_PER_LIST)]
    variants += [(f"capped_{cap:g}", True, cap, TRAIN_POINTS_PER_LIST) for cap in caps]
    variants = [v for v in variants if not only or v[0] in only]
    runs = []
    for name, refine, cap, points in variants:
        ivf, build_s = build(codes, ids, nlist, refine, cap, points)
        row: dict[str, Any] = {"variant": name, "refined": refine, "list_cap": cap, "train_points_per_list": points, "build_s": build_s,
                               "lists": list_stats(ivf.list_sizes()), "nprobe": []}
        with timing_lock(enabled=lock) as waited:
            for nprobe in nprobes:
                stats, got_d, got_ids = latencies(lambda q, p=nprobe: ivf.search(q, K, p), queries, passes)
                reads = scanned(ivf, queries, nprobe)
                row["nprobe"].append({"nprobe": nprobe, "recall_at_10": tie_tolerant_recall(true_d, got_d, got_ids), **stats,
                                      "scanned_p50": float(np.median(reads)), "scanned_p99": float(np.percentile(reads, 99)),
                                      "scanned_max": int(reads.max()), "scanned_mean": float(reads.mean())})
        row["lock_wait_s"] = waited
        runs.append(row)
        print(name, row["lists"], [(r["nprobe"], round(r["recall_at_10"], 4), round(r["p99_ms"], 3), r["scanned_p99"])
                                   for r in row["nprobe"]], flush=True)
        del ivf
    return {"runs": runs, "at_equal_recall": at_equal_recall(runs)}


def at_equal_recall(runs: list[dict[str, Any]], target: float = TARGET_RECALL) -> dict[str, Any]:
    """Each variant at its cheapest nprobe reaching ``target``: what a query then scans and takes, side by side."""
    rows = []
    for run in runs:
        good = [r for r in run["nprobe"] if r["recall_at_10"] >= target]
        if good:
            pick = min(good, key=lambda r: r["nprobe"])
            rows.append({"variant": run["variant"], "nprobe": pick["nprobe"], "recall_at_10": pick["recall_at_10"],
                         "scanned_mean": pick["scanned_mean"], "scanned_p99": pick["scanned_p99"], "scanned_max": pick["scanned_max"],
                         "p50_ms": pick["p50_ms"], "p99_ms": pick["p99_ms"]})
    base = next((r for r in rows if r["variant"] == "faiss"), None)
    for row in rows:
        if base:
            row["scanned_p99_vs_faiss"] = row["scanned_p99"] / base["scanned_p99"]
            row["scanned_mean_vs_faiss"] = row["scanned_mean"] / base["scanned_mean"]
    best = min(rows, key=lambda r: r["scanned_p99"])["variant"] if rows else None
    curves = {run["variant"]: interpolated(run["nprobe"], target) for run in runs}
    return {"target_recall_at_10": target, "rows": rows, "least_scanned_p99": best,
            "interpolated": {"how": "codes scanned at exactly the target recall, linear between the two nprobes around it",
                             "rows": curves,
                             "least_scanned_p99": min((v for v in curves if curves[v]), key=lambda v: curves[v]["scanned_p99"], default=None)}}


def interpolated(points: list[dict[str, Any]], target: float) -> dict[str, float] | None:
    """Scanned codes (p99, mean) and nprobe where recall@10 crosses ``target`` (recall rises with nprobe)."""
    for low, high in zip(points, points[1:]):
        if low["recall_at_10"] < target <= high["recall_at_10"]:
            w = (target - low["recall_at_10"]) / (high["recall_at_10"] - low["recall_at_10"])
            return {key: low[key] + w * (high[key] - low[key]) for key in ("nprobe", "scanned_p99", "scanned_mean")}
    return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=10**6, help="the first N codes of bench/index/scale's real-audio set")
    parser.add_argument("--nlist", type=int, default=1024)
    parser.add_argument("--nprobe", type=int, nargs="+", default=NPROBES)
    parser.add_argument("--caps", type=float, nargs="+", default=CAPS)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--variants", nargs="+", default=None, help="only these (faiss, faiss_sample_256, refined, capped_N)")
    parser.add_argument("--data", type=Path, default=audio_codes.SHARED_DATA)
    parser.add_argument("--embedded", type=Path, default=None, help="an embedded-windows .npz (default: embed --data once)")
    parser.add_argument("--cache", type=Path, default=audio_codes.CACHE)
    parser.add_argument("--no-timing-lock", action="store_true", help="tests: time without /tmp/recall-timing.lock")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--summarise", action="store_true", help="recompute at_equal_recall of --out's runs, measuring nothing")
    args = parser.parse_args(argv)
    if args.summarise:
        result = json.loads(args.out.read_text())
        result["at_equal_recall"] = at_equal_recall(result["runs"])
        write_results(result, args.out)
        return result

    embedded = args.embedded or audio_codes.embed_real_windows(args.data, args.cache)
    recipe = audio_codes.load_recipe(embedded)
    path = audio_codes.codes_file(recipe, embedded, args.windows, args.cache)
    width = recipe.sources.shape[1] // 8
    real = recipe.queries()  # the same 200 held-out real windows as bench/index/scale.py
    queries = real[np.sort(np.random.default_rng(5).choice(len(real), min(args.queries, len(real)), replace=False))]
    codes = audio_codes.read_codes(path, width, 0, args.windows)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
        "load_average_start": list(os.getloadavg()), "windows": args.windows, "nlist": args.nlist, "k": K,
        "queries": len(queries), "codes": {**recipe.describe(), "bits": width * 8, "cache_file": str(path)},
        "recall": "tie-tolerant recall@10 against exact flat search over the same codes",
        "scanned": "codes in the lists a query probes (the sum of their sizes): the work of one query",
        "timing": f"one query at a time, least disturbed of {PASSES} passes, under /tmp/recall-timing.lock; FAISS on one thread",
    }
    result.update(measure(codes, queries, args.nlist, args.nprobe, args.caps, lock=not args.no_timing_lock, only=args.variants))
    result["load_average_end"] = list(os.getloadavg())
    result["peak_rss_bytes"] = peak_rss_bytes()  # codes, flat truth and one variant's IVF at a time
    write_results(result, args.out)
    return result


if __name__ == "__main__":
    main()
