"""Scale: flat and IVF binary search over 10^6, 10^7 and 10^8 windows of real-audio codes, one machine.

Writes ``bench/results/scale.json``: a list ``runs``, one object per (windows, kind, nprobe) with ``p50_ms``,
``p99_ms`` (one client, one query at a time), ``qps_16`` (16 client threads, each one query at a time),
``recall_at_10`` (tie-tolerant, against exact flat search over the same codes), ``rss_bytes`` (peak resident set
of the process that built and searched that index alone) and ``build_s``.

The indices are Recall's own: :class:`~app.index.BinaryIndex` (flat, what every collection searches) and
:class:`~app.index.BinaryIVF` (what an ``ivf``/``auto`` collection trains: sampled k-means, ``auto_nlist`` lists
unless ``--nlist`` says otherwise). Each (size, kind) is built in a child process of its own, so its peak RSS is
its own; codes are streamed into it from a cache file in chunks, so the RSS is the index's, not the data's.

The codes are realistic (bench/index/_audio_codes.py): real windows of ../shared/data embedded by a trained
256-bit Recall encoder, augmented before the sign for volume; queries are held-out real windows. Bulk work runs
at the niceness the bench was started with (start it under ``nice -n 19``); every timed part holds
/tmp/recall-timing.lock.

    nice -n 19 python -m bench.index.scale                          # 10^6, 10^7, 10^8 (first run: ~1 h)
    nice -n 19 python -m bench.index.scale --sizes 1000000 --out /tmp/scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.index import _audio_codes as audio_codes
from bench.index._measure import K, cpu_seconds, current_rss_bytes, latencies, peak_rss_bytes, throughput, tie_tolerant_recall, timing_lock

OUT = Path(__file__).resolve().parents[1] / "results" / "scale.json"
SIZES = [10**6, 10**7, 10**8]
NPROBES = [8, 16, 32, 64, 128]
PASSES = 3  # latency passes per index; the least disturbed is reported (a shared machine)
FLAT_SAMPLE_ABOVE = 10**7  # past this, flat's latency and q/s are measured on a sample of the queries
TARGETS = {10**8: {"p50_ms": 10.0, "recall_at_10": 0.95, "rss_bytes": 16 * 10**9},
           10**7: {"p50_ms": 3.0, "recall_at_10": 0.95, "build_s": 600.0}}


def ids_of(start: int, count: int) -> np.ndarray:
    """Ids that are not row numbers (as a catalog's are not), computable for any chunk."""
    return np.arange(start, start + count, dtype=np.int64) * 3 + 7


def _clients_load(p50_ms: float, clients: int, seconds: float = 8.0) -> int:
    """Queries per client so that a q/s measurement takes about ``seconds`` on 2 cores."""
    return int(np.clip(round(seconds * 1000 * 2 / (clients * max(p50_ms, 1e-3))), 1, 64))


# --- children: one index each ------------------------------------------------------------------------

def child_flat(spec: dict[str, Any]) -> dict[str, Any]:
    from app.index import BinaryIndex

    n, width, path = spec["windows"], spec["width"], Path(spec["codes"])
    queries = np.load(spec["queries"])
    t, cpu = time.perf_counter(), cpu_seconds()
    flat = BinaryIndex(width * 8, shards=2)
    flat.reserve(n)
    for start, codes in audio_codes.chunks_of(path, width, n):
        flat.add(ids_of(start, len(codes)), codes)
        del codes
    build_s, build_cpu_s = time.perf_counter() - t, cpu_seconds() - cpu
    rss_built = current_rss_bytes()
    t = time.perf_counter()
    true_d, true_ids = flat.search(queries, K)  # the ground truth, in one batch
    truth_s = time.perf_counter() - t
    np.savez(spec["truth"], d=true_d, ids=true_ids)
    timed = queries if n <= FLAT_SAMPLE_ABOVE else queries[: spec["flat_sample"]]
    with timing_lock(enabled=spec["lock"]) as waited:
        stats, got_d, _ = latencies(lambda q: flat.search(q, K), timed, PASSES)
        qps = throughput(lambda q: flat.search(q, K), timed, spec["clients"], _clients_load(stats["p50_ms"], spec["clients"]))
    assert np.array_equal(got_d, true_d[: len(timed)]), "flat one at a time disagrees with flat in a batch"
    return {"windows": n, "kind": "flat", **stats, "qps_16": qps["qps"], "qps_queries": qps["queries"], "recall_at_10": 1.0,
            "rss_bytes": peak_rss_bytes(), "rss_after_build_bytes": rss_built, "build_s": build_s,
            "build_cpu_s": build_cpu_s, "memory_bytes": flat.memory_bytes(), "timed_queries": len(timed), "truth_batch_s": truth_s, "lock_wait_s": waited}


def child_ivf(spec: dict[str, Any]) -> list[dict[str, Any]]:
    from app.index import BinaryIVF
    from app.index.ivf import TRAIN_POINTS_PER_LIST

    n, width, path, nlist = spec["windows"], spec["width"], Path(spec["codes"]), spec["nlist"]
    queries = np.load(spec["queries"])
    truth = np.load(spec["truth"])
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # build on one thread: on a shared, oversubscribed machine OpenMP's barriers wait out other jobs' time slices
    t, cpu = time.perf_counter(), cpu_seconds()
    # BinaryIVF.train samples TRAIN_POINTS_PER_LIST codes per list; rows are independent draws, so the file's
    # first rows are such a sample, read without touching the rest
    ivf = BinaryIVF.train(audio_codes.read_codes(path, width, 0, min(n, TRAIN_POINTS_PER_LIST * nlist)), nlist)
    train_s = time.perf_counter() - t
    coarse = hnsw_quantizer(ivf, audio_codes.read_codes(path, width, 0, min(n, 50_000))) if spec["quantizer"] == "hnsw" else {}
    for start, codes in audio_codes.chunks_of(path, width, n):
        ivf.add(ids_of(start, len(codes)), codes)
        del codes
    build_s, build_cpu_s = time.perf_counter() - t, cpu_seconds() - cpu
    faiss.omp_set_num_threads(threads)  # searches as the service runs them
    rss_built = current_rss_bytes()
    sizes = ivf.list_sizes()
    rows = []
    with timing_lock(enabled=spec["lock"]) as waited:
        for nprobe, team in ((p, t) for p in spec["nprobes"] for t in spec.get("search_threads") or [0]):
            if nprobe > nlist:
                continue
            search = searcher(ivf, nprobe, team or threads)
            stats, got_d, got_ids = latencies(search, queries, PASSES)
            qps = throughput(search, queries, spec["clients"], _clients_load(stats["p50_ms"], spec["clients"]))
            if spec.get("answers") and not team:
                np.savez(Path(spec["answers"]) / f"ivf-{n}-{nprobe}.npz", d=got_d, ids=got_ids)
            rows.append({"windows": n, "kind": "ivf", "nlist": nlist, "nprobe": nprobe, "quantizer": spec["quantizer"],
                         "search_threads": team or threads, "search_threads_default": not team, **stats, "qps_16": qps["qps"],
                         "qps_queries": qps["queries"], "recall_at_10": tie_tolerant_recall(truth["d"], got_d, got_ids),
                         "build_s": build_s, "build_cpu_s": build_cpu_s, "train_s": train_s, "trained_on": ivf.trained_on,
                         "memory_bytes": ivf.memory_bytes(), "rss_after_build_bytes": rss_built,
                         "list_size_p50": int(np.median(sizes)), "list_size_max": int(sizes.max()), "lock_wait_s": waited,
                         **({"coarse_assignment": coarse} if coarse else {})})
    for row in rows:
        row["rss_bytes"] = peak_rss_bytes()  # after every search: the peak of the whole life of this index
    return rows


def searcher(ivf: Any, nprobe: int, team: int) -> Any:
    """One query's search with FAISS' OpenMP team set to ``team`` on the calling thread (the setting is per OS
    thread, so every client thread of the q/s measurement sets it too; setting it costs ~0.1 us)."""
    import faiss

    def search(q: np.ndarray) -> Any:
        faiss.omp_set_num_threads(team)
        return ivf.search(q, K, nprobe)

    return search


def hnsw_quantizer(ivf: Any, sample: np.ndarray, m: int = 32, ef: int = 64) -> dict[str, Any]:
    """Swap the trained IVF's flat coarse quantizer for an HNSW graph over the same centroids.

    Adding a code to an IVF finds its nearest centroid: the flat quantizer compares it with all nlist, ~4x10^11
    Hamming distances for 10^8 codes into 4096 lists; the graph visits fewer but slower. Both are timed here on
    ``sample`` and their assignments compared, so the choice is measured (the service uses flat). Measured on the
    10^8 set with one thread: flat 215,000 codes per CPU-second, the graph 52,000 at efSearch 64 with the same
    list for 90% of codes, so flat stays the default (``--hnsw-quantizer-from`` is off unless asked).
    """
    import faiss

    flat = faiss.downcast_IndexBinary(ivf._index.quantizer)
    centroids = faiss.vector_to_array(flat.xb).reshape(flat.ntotal, flat.code_size)
    t = time.perf_counter()
    _, exact = flat.search(sample, 1)
    flat_s = time.perf_counter() - t
    t = time.perf_counter()
    graph = faiss.IndexBinaryHNSW(flat.d, m)
    graph.add(centroids)
    graph_build_s = time.perf_counter() - t
    graph.hnsw.efSearch = ef  # a search asking for nprobe > ef lists gets nprobe (FAISS takes the larger)
    t = time.perf_counter()
    dist, got = graph.search(sample, 1)
    graph_s = time.perf_counter() - t
    exact_d = np.unpackbits(sample ^ centroids[exact[:, 0]], axis=1).sum(axis=1)
    ivf._index.quantizer = graph
    ivf._coarse_graph = graph  # the Python object owns it: keep it alive as long as the index
    return {"sample": len(sample), "M": m, "efSearch": ef, "graph_build_s": graph_build_s,
            "flat_codes_per_s": len(sample) / flat_s, "hnsw_codes_per_s": len(sample) / graph_s,
            "same_list": float(np.mean(got[:, 0] == exact[:, 0])), "same_distance": float(np.mean(dist[:, 0] == exact_d))}


def run_child(spec: dict[str, Any]) -> Any:
    """Run one (size, kind) in a fresh interpreter; its last stdout line is its JSON result."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}  # k-means' BLAS: one thread, as the build
    done = subprocess.run([sys.executable, "-m", "bench.index.scale", "--child", json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2], env=env)
    if done.returncode != 0:
        raise RuntimeError(f"child {spec['kind']} at {spec['windows']} failed ({done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the run ---------------------------------------------------------------------------------------

def choose(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per size: the cheapest IVF nprobe that reaches recall@10 0.95, against each target the issue sets."""
    verdicts = []
    for n in sorted({r["windows"] for r in runs}):
        ivf = sorted((r for r in runs if r["windows"] == n and r["kind"] == "ivf" and r.get("search_threads_default", True)),
                     key=lambda r: r["p50_ms"])  # FAISS' default team, as before; --search-threads rows sit beside
        good = [r for r in ivf if r["recall_at_10"] >= 0.95]
        flat = next((r for r in runs if r["windows"] == n and r["kind"] == "flat"), None)
        pick = good[0] if good else (max(ivf, key=lambda r: r["recall_at_10"]) if ivf else None)
        if pick is None:
            continue
        pick["chosen"] = True
        verdict: dict[str, Any] = {"windows": n, "nlist": pick["nlist"], "nprobe": pick["nprobe"], "p50_ms": pick["p50_ms"],
                                   "recall_at_10": pick["recall_at_10"], "rss_bytes": pick["rss_bytes"], "build_s": pick["build_s"]}
        for other in runs:  # the same nprobe timed with another OpenMP team in the same run
            if other["windows"] == n and other["kind"] == "ivf" and other["nprobe"] == pick["nprobe"] and not other.get("search_threads_default", True):
                verdict[f"p50_ms_search_threads_{other['search_threads']}"] = other["p50_ms"]
        if flat:
            verdict["speedup_p50_vs_flat"] = flat["p50_ms"] / pick["p50_ms"]
            verdict["qps_16_ratio_vs_flat"] = pick["qps_16"] / flat["qps_16"]
        for name, bound in TARGETS.get(n, {}).items():
            verdict[f"meets_{name}"] = bool(pick[name] >= bound if name == "recall_at_10" else pick[name] <= bound)
        verdicts.append(verdict)
    return verdicts


def cluster_overhead_ms(path: Path = OUT.parent / "cluster.json") -> float:
    """The scatter/merge round trip bench/cluster/cluster.py measured (what every sharded query adds)."""
    try:
        assumes = json.loads(path.read_text())["results"]["sizing_model"]["assumes"]
        return float(re.search(r"overhead ([0-9.]+) ms", assumes).group(1))  # type: ignore[union-attr]
    except (OSError, KeyError, ValueError, AttributeError):
        return 2.067


def sizing(runs: list[dict[str, Any]], overhead_ms: float, shard_memory_gb: float = 16.0) -> dict[str, Any]:
    """bench/cluster's sizing model redone with the IVF kind, from this run's measured figures.

    A shard of m windows answers one query in the chosen IVF's p50 at m (interpolated log-log between the
    measured sizes; past the largest, proportional to m: at a fixed nlist and nprobe the probed lists grow
    with m) plus the scatter/merge round trip; 16 clients get the chosen IVF's measured 16-client q/s at m
    (each shard on its own node does every query over its part). A shard holds flat and IVF both (the flat
    index stays the store of record): memory per window is the two children's peak RSS at the largest size
    over its windows.
    """
    chosen = sorted((r for r in runs if r.get("chosen")), key=lambda r: r["windows"])
    flats = {r["windows"]: r for r in runs if r["kind"] == "flat"}
    if not chosen or chosen[-1]["windows"] not in flats:
        return {}
    top = chosen[-1]
    per_window = (top["rss_bytes"] + flats[top["windows"]]["rss_bytes"]) / top["windows"]
    sizes = np.log([r["windows"] for r in chosen])

    def at(m: float, field: str) -> float:
        values = np.log([r[field] for r in chosen])
        if m > top["windows"]:
            scale = m / top["windows"]
            return top[field] * (scale if field == "p50_ms" else 1 / scale)
        return float(np.exp(np.interp(np.log(m), sizes, values)))

    out: dict[str, Any] = {"assumes": f"shards of at most {shard_memory_gb} GB, one per node; flat + IVF in memory "
                           f"({per_window:.1f} bytes per window, measured RSS); scatter/merge {overhead_ms} ms "
                           "(bench/results/cluster.json); IVF as chosen per size in this run"}
    for total in (10**8, 10**9):
        rows = []
        for shards in (1, 2, 4, 8, 16, 32, 64):
            m = total / shards
            memory_gb = m * per_window / 1e9
            latency = at(m, "p50_ms") + overhead_ms
            rows.append({"shards": shards, "memory_gb_per_shard": round(memory_gb, 2), "fits": memory_gb <= shard_memory_gb,
                         "one_client_latency_ms": round(latency, 2), "one_client_qps": round(1000 / latency, 1),
                         "clients_16_qps": round(at(m, "qps_16"), 1), "measured": bool(m in {r["windows"] for r in chosen})})
        out[f"{total:.0e}"] = rows
    return out


def merge(paths: list[Path], out: Path) -> dict[str, Any]:
    """One result from runs made one size at a time (same codes file and queries), verdicts and sizing redone."""
    parts = [json.loads(p.read_text()) for p in paths]
    if len({part["codes"]["cache_file"] for part in parts}) != 1:
        raise ValueError("the parts were run on different code sets")
    result = {**parts[0], "runs": [r for part in parts for r in part["runs"]],
              "parts": [{"sizes": sorted({r["windows"] for r in part["runs"]}), "date": part["date"],
                         "load_average_start": part["load_average_start"], "load_average_end": part.get("load_average_end")}
                        for part in parts]}
    for row in result["runs"]:
        row.pop("chosen", None)
    result["verdicts"] = choose(result["runs"])
    result["sizing_model"] = sizing(result["runs"], cluster_overhead_ms())
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=SIZES)
    parser.add_argument("--queries", type=int, default=200, help="held-out real windows queried (recall, IVF latency)")
    parser.add_argument("--flat-sample", type=int, default=24, help=f"queries timed on flat past {FLAT_SAMPLE_ABOVE} windows")
    parser.add_argument("--nprobe", type=int, nargs="+", default=NPROBES)
    parser.add_argument("--nlist", type=int, default=None, help="IVF lists (default: auto_nlist of the size, as a collection)")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--search-threads", type=int, nargs="+", default=[0],
                        help="OpenMP teams to time each IVF nprobe with, alternating (0: FAISS' default, the verdict's)")
    parser.add_argument("--hnsw-quantizer-from", type=int, default=10**12,
                        help="sizes from this up give the IVF an HNSW coarse quantizer (flat below, as a collection)")
    parser.add_argument("--data", type=Path, default=audio_codes.SHARED_DATA)
    parser.add_argument("--windows", type=Path, default=None, help="an embedded-windows .npz (default: embed --data once)")
    parser.add_argument("--cache", type=Path, default=audio_codes.CACHE)
    parser.add_argument("--no-timing-lock", action="store_true", help="tests: time without /tmp/recall-timing.lock")
    parser.add_argument("--answers", action="store_true", help="keep each IVF run's answers in the cache (tests)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--merge", type=Path, nargs="+", help="join the runs of several result files (one per size) into --out")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.merge:
        return merge(args.merge, args.out)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(child_flat(spec) if spec["kind"] == "flat" else child_ivf(spec)), flush=True)
        return {}

    from app.index.kinds import auto_nlist

    t = time.perf_counter()
    windows = args.windows or audio_codes.embed_real_windows(args.data, args.cache)
    recipe = audio_codes.load_recipe(windows)
    path = audio_codes.codes_file(recipe, windows, max(args.sizes), args.cache)
    width = recipe.sources.shape[1] // 8
    real = recipe.queries()
    queries = real[np.sort(np.random.default_rng(5).choice(len(real), min(args.queries, len(real)), replace=False))]
    work = args.cache / f"run-{os.getpid()}"
    work.mkdir(parents=True, exist_ok=True)
    np.save(work / "queries.npy", queries)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "faiss": __import__("faiss").__version__},
        "k": K, "recall": "tie-tolerant recall@10 against exact flat search over the same codes",
        "queries": len(queries), "flat_sample_above": FLAT_SAMPLE_ABOVE, "flat_sample": args.flat_sample,
        "codes": {**recipe.describe(), "bits": width * 8, "cache_file": str(path), "data_s": time.perf_counter() - t,
                  "sizes": "each size is the first n rows of one generated file (rows are independent draws)"},
        "rss": "peak resident set (ru_maxrss) of a child process that built and searched only that index",
        "runs": [], "verdicts": [], "load_average_start": list(os.getloadavg()),
    }
    for n in args.sizes:
        spec = {"windows": n, "width": width, "codes": str(path), "queries": str(work / "queries.npy"),
                "truth": str(work / f"truth-{n}.npz"), "clients": args.clients, "flat_sample": args.flat_sample,
                "nprobes": args.nprobe, "nlist": args.nlist or auto_nlist(n), "search_threads": args.search_threads,
                "quantizer": "hnsw" if n >= args.hnsw_quantizer_from else "flat", "answers": str(work) if args.answers else None,
                "lock": not args.no_timing_lock}
        for kind in ("flat", "ivf"):
            got = run_child({**spec, "kind": kind})
            for row in got if isinstance(got, list) else [got]:
                result["runs"].append(row)
                print(json.dumps(row), flush=True)
            result["verdicts"] = choose(result["runs"])
            result["sizing_model"] = sizing(result["runs"], cluster_overhead_ms())
            result["load_average_end"] = list(os.getloadavg())
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["work"] = str(work)
    return result


if __name__ == "__main__":
    main()
