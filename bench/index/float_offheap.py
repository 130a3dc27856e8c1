"""Two-stage search with float vectors on the heap vs in memory-mapped files (issue 32, part 2).

Writes ``bench/results/float_offheap.json``. Per size, the same data (a Gaussian mixture in 128-d,
unit-normalised floats, 256-bit SimHash codes: bench/index/index_kinds.py's ``Mixture``) is indexed in
separate processes, one per float store, so that each one's RSS is its own:

* ``memory``: :class:`~app.index.FloatIndex`, rows on the heap;
* ``mmap``: :class:`~app.index.MappedFloatIndex`, rows in unlinked files under ``--work``.

Stage 1 is the same binary index in both (an IVF trained once per size by this parent process and
loaded by each child, plus the exact flat scan up to ``--flat-max`` windows); stage 2 is the
pipeline's re-rank (app/search/pipeline.py: ``_segment_distances``): the shortlist's distinct ids,
``reconstruct_present``, exact cosine, min over the query's windows. Shortlists are the service's
default, k=10 x 4 x oversample 10 = 400 rows per query window, for one-window queries and for
10-window ones (up to 4,000 rows). Each child records p50/p99 of the whole two-stage query and of
stage 2 alone, one query at a time, a digest of every answer (the two stores must agree bit for
bit), and RSS from /proc/self/status: ``anon`` is the heap (what cannot be paged out), ``file``
the mapped rows that are resident (page cache, reclaimable). The mmap child then writes its rows
back and evicts them from the page cache and repeats the queries cold: the worst case, every
shortlisted row a disk read. When memory allows (``--paired``), one more child holds both stores
and alternates them query by query, so that their ratio is measured under the same load.

    python -m bench.index.float_offheap                                   # 10^6 and 10^7 windows
    python -m bench.index.float_offheap --sizes 20000 --queries 20 --out /tmp/x.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import faiss
import numpy as np

from app.index import BinaryIndex, BinaryIVF, FloatIndex, MappedFloatIndex
from app.index.kinds import default_nprobe
from app.search.pipeline import _sorted_distinct
from app.search.ranking import cosine_distance
from bench.index.index_kinds import Mixture

K, DIM, BITS = 10, 128, 256
SHORTLIST = K * 4 * 10  # the pipeline's first depth (4k) x the default oversample (10)
CHUNK = 100_000
OUT = Path(__file__).resolve().parents[1] / "results" / "float_offheap.json"


# --- data (the same in every process: seeded per chunk) ---------------------------------------

def mixture_of(n: int, seed: int = 0) -> Mixture:
    return Mixture(BITS, seed=seed, centres=max(16, min(2048, n // 50)))


def chunk(mixture: Mixture, n: int, number: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Chunk ``number`` of the database: ``(unit floats, codes)``, seeded by its number alone."""
    x = mixture.vectors(min(CHUNK, n - number * CHUNK), np.random.default_rng([seed, number]))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), mixture.codes_of(x)


def chunks(n: int, seed: int = 0):
    """``(start, unit floats, codes)`` of the database, chunk by chunk: nothing holds all rows."""
    mixture = mixture_of(n, seed)
    for number, start in enumerate(range(0, n, CHUNK)):
        yield (start, *chunk(mixture, n, number, seed))


def queries(n: int, count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Unit query floats and their codes: half fresh draws, half stored rows with noise."""
    mixture = mixture_of(n, seed)
    stored, _ = chunk(mixture, n, 0, seed)
    rng = np.random.default_rng([seed, 1 << 20])
    fresh = mixture.vectors(count - count // 2, rng)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    echoes = stored[rng.integers(0, len(stored), count // 2)] + 0.05 * rng.standard_normal((count // 2, DIM)).astype(np.float32)
    x = np.concatenate([fresh, echoes])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32), mixture.codes_of(x)


def rss() -> dict[str, int]:
    """Bytes from /proc/self/status: VmRSS, VmHWM (peak), RssAnon (heap), RssFile (mapped files)."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


# --- one child: build, measure ----------------------------------------------------------------

def two_stage(stage1: Callable, floats: FloatIndex, q_codes: np.ndarray, q_floats: np.ndarray) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The pipeline's two-stage round for one query of ``len(q_codes)`` windows: top-K ids and
    distances, and the seconds of stage 1 and of stage 2."""
    t0 = time.perf_counter()
    _, ids = stage1(q_codes, SHORTLIST)
    t1 = time.perf_counter()
    candidates, vectors = floats.reconstruct_present(_sorted_distinct(ids[ids >= 0]))
    distances = cosine_distance(q_floats, vectors).min(axis=0)
    top = np.argsort(distances, kind="stable")[:K]
    t2 = time.perf_counter()
    return candidates[top], distances[top], t1 - t0, t2 - t1


def build(n: int, store: str, work: Path) -> tuple[FloatIndex, BinaryIndex | None, float]:
    index = MappedFloatIndex(DIM, directory=work) if store == "mmap" else FloatIndex(DIM)
    flat = BinaryIndex(BITS) if n <= ARGS.flat_max else None
    add_s = 0.0
    for start, x, codes in chunks(n):
        ids = np.arange(start, start + len(x), dtype=np.int64)
        t = time.perf_counter()
        index.add(ids, x)
        add_s += time.perf_counter() - t
        if flat is not None:
            flat.add(ids, codes)
    return index, flat, add_s


def evict(index: MappedFloatIndex) -> None:
    """Write the mapped rows back and drop them from this process and the page cache (a cold start)."""
    for shard in index._shards:
        region: Any = shard._data
        while region is not None and not isinstance(region, mmap.mmap):  # array -> array -> memoryview -> mmap
            region = region.obj if isinstance(region, memoryview) else getattr(region, "base", None)
        if region is None or shard._file is None:
            continue
        region.flush()
        region.madvise(mmap.MADV_DONTNEED)
        os.posix_fadvise(shard._file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def measure(stores: dict[str, FloatIndex], stage1s: dict[str, Callable], q_floats: np.ndarray, q_codes: np.ndarray,
            windows: int, count: int) -> list[dict[str, Any]]:
    """Latencies of every (stage 1, store), stores alternating query by query; answer digests."""
    rows = []
    for s1_name, stage1 in stage1s.items():
        times = {name: ([], []) for name in stores}
        digests = {name: hashlib.sha256() for name in stores}
        for q in range(count + 2):
            pick = np.arange(q * windows, (q + 1) * windows) % len(q_floats)
            for name, floats in stores.items():
                ids, dist, s1, s2 = two_stage(stage1, floats, q_codes[pick], q_floats[pick])
                if q >= 2:  # two warm-up queries
                    times[name][0].append((s1 + s2) * 1000)
                    times[name][1].append(s2 * 1000)
                    digests[name].update(ids.tobytes() + dist.tobytes())
        for name in stores:
            total, rerank = (np.asarray(t) for t in times[name])
            rows.append({"floats": name, "stage1": s1_name, "query_windows": windows, "shortlist_per_window": SHORTLIST,
                         "queries": count, "p50_ms": float(np.median(total)), "p99_ms": float(np.percentile(total, 99)),
                         "mean_ms": float(total.mean()), "rerank_p50_ms": float(np.median(rerank)),
                         "rerank_p99_ms": float(np.percentile(rerank, 99)), "digest": digests[name].hexdigest()[:16]})
    return rows


def child(n: int, stores: list[str], work: Path) -> dict[str, Any]:
    # one OpenMP thread, as the service's scan threads run faiss: with two on a busy 2-core machine a
    # 10^7 IVF probe took ~30 ms of spinning instead of ~2, drowning the stage this bench compares
    faiss.omp_set_num_threads(1)
    q_floats, q_codes = queries(n, ARGS.queries)
    t = time.perf_counter()
    built = {store: build(n, store, work) for store in stores}
    out: dict[str, Any] = {"windows": n, "floats": stores, "build_s": time.perf_counter() - t,
                           "add_s": {s: b[2] for s, b in built.items()}}
    ivf, _ = BinaryIVF.load(work / f"ivf-{n}.bin", BITS)
    stage1s: dict[str, Callable] = {"ivf": lambda q, k: ivf.search(q, k)}
    flat = built[stores[0]][1]
    if flat is not None:
        stage1s["flat"] = lambda q, k: flat.search(q, k)
    floats = {s: b[0] for s, b in built.items()}
    out["heap_bytes"] = {s: f.memory_bytes() for s, f in floats.items()}
    out["file_bytes"] = {s: f.file_bytes() for s, f in floats.items() if isinstance(f, MappedFloatIndex)}
    out["rss_after_build"] = rss()
    out["runs"] = measure(floats, stage1s, q_floats, q_codes, 1, ARGS.queries)
    out["runs"] += measure(floats, {"ivf": stage1s["ivf"]}, q_floats, q_codes, 10, max(10, ARGS.queries // 4))
    out["rss_after_queries"] = rss()
    if stores == ["mmap"]:
        cached = page_cache()
        evict(floats["mmap"])
        out["rss_after_evict"] = rss()
        out["page_cache_dropped_bytes"] = cached - page_cache()  # ~ the file: the eviction really happened
        cold = measure(floats, {"ivf": stage1s["ivf"]}, q_floats[::-1].copy(), q_codes[::-1].copy(), 1, ARGS.queries)
        out["cold"] = cold[0] | {"note": "rows evicted from the page cache first: most shortlisted rows are disk reads"}
        out["rss_after_cold_queries"] = rss()
    if stores == ["memory"]:  # how good two-stage is, against the exact float top-10 (same for both stores)
        exact_ids = floats["memory"].search(q_floats, K)[1]
        got = [two_stage(stage1s["ivf"], floats["memory"], q_codes[i : i + 1], q_floats[i : i + 1])[0] for i in range(len(q_floats))]
        out["recall_at_10_vs_exact_float"] = float(np.mean([len(set(g) & set(e)) / K for g, e in zip(got, exact_ids.tolist())]))
    return out


# --- parent -----------------------------------------------------------------------------------

def prepare_stage1(n: int, work: Path) -> dict[str, Any]:
    """Train the IVF every child loads (the same stage 1 for both stores)."""
    t = time.perf_counter()
    codes = np.concatenate([c for _, _, c in chunks(n)])
    nlist = min(ARGS.nlist, max(16, 2 ** int(np.log2(n // 39))))
    ivf = BinaryIVF.train(codes, nlist)
    ivf.add(np.arange(n, dtype=np.int64), codes)
    ivf.save(work / f"ivf-{n}.bin", last_seq=0)
    return {"kind": "ivf", "nlist": ivf.nlist, "nprobe": ivf.nprobe, "default_nprobe": default_nprobe(ivf.nlist, n),
            "build_s": time.perf_counter() - t}


def run_child(n: int, stores: list[str], work: Path) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.index.float_offheap", "--child", "--sizes", str(n), "--floats", ",".join(stores),
           "--work", str(work), "--queries", str(ARGS.queries), "--flat-max", str(ARGS.flat_max)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child {stores} at {n} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}), flush=True)
    return result


def ratios(memory: list[dict[str, Any]], mapped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for m in memory:
        o = next(r for r in mapped if (r["stage1"], r["query_windows"]) == (m["stage1"], m["query_windows"]))
        out.append({"stage1": m["stage1"], "query_windows": m["query_windows"], "p50_ratio": o["p50_ms"] / m["p50_ms"],
                    "p99_ratio": o["p99_ms"] / m["p99_ms"], "rerank_p50_ratio": o["rerank_p50_ms"] / m["rerank_p50_ms"],
                    "same_answers": o["digest"] == m["digest"]})
    return out


def page_cache() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
    return 0


def available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--nlist", type=int, default=1024, help="IVF lists of stage 1 (at most; fewer for small sizes)")
    parser.add_argument("--flat-max", type=int, default=1_000_000, help="also measure the exact flat stage 1 up to this size")
    parser.add_argument("--work", type=Path, default=None, help="folder for the mapped files and the IVF (a real disk)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--floats", default="memory", help=argparse.SUPPRESS)
    ARGS = parser.parse_args(argv)
    if ARGS.child:
        result = child(ARGS.sizes[0], ARGS.floats.split(","), ARGS.work)
        print(json.dumps(result), flush=True)
        return result
    work = ARGS.work or Path(tempfile.mkdtemp(prefix="recall-float-offheap-", dir="/var/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "disk_free_bytes": _free(work)},
        "k": K, "dim": DIM, "bits": BITS, "shortlist_per_window": SHORTLIST, "blocks": [],
    }
    for n in ARGS.sizes:
        block: dict[str, Any] = {"windows": n, "float_bytes": n * DIM * 4, "stage1": prepare_stage1(n, work)}
        print(json.dumps(block), flush=True)
        memory, mapped = run_child(n, ["memory"], work), run_child(n, ["mmap"], work)
        block["children"] = [memory, mapped]
        block["ratios_separate_processes"] = ratios(memory["runs"], mapped["runs"])
        if available_bytes() > 3 * n * DIM * 4 + (2 << 30):
            paired = run_child(n, ["memory", "mmap"], work)
            block["paired"] = paired
            runs = paired["runs"]
            block["ratios_paired"] = ratios([r for r in runs if r["floats"] == "memory"], [r for r in runs if r["floats"] == "mmap"])
        else:
            block["paired"] = None  # both stores at once would not fit beside each other
        block["same_answers"] = all(r["same_answers"] for key in ("ratios_separate_processes", "ratios_paired") for r in block.get(key) or [])
        result["blocks"].append(block)
        (work / f"ivf-{n}.bin").unlink(missing_ok=True)
        ARGS.out.parent.mkdir(parents=True, exist_ok=True)
        ARGS.out.write_text(json.dumps(result, indent=1) + "\n")  # after each size: a long run keeps what it measured
    return result


def _free(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


ARGS: argparse.Namespace

if __name__ == "__main__":
    main()
