"""Index kinds on cluster shards: flat against IVF through Ray shard actors, same data, same run.

Two collections over the same realistic 256-bit codes (bench/index/_audio_codes.py: real audio windows
of ../shared/data embedded by a trained Recall encoder, augmented for volume; queries are the exact codes
of held-out clips' windows), one ``flat`` and one ``ivf`` (auto nlist and nprobe), each on
``--shards`` Ray shard actors over one PostgreSQL catalog. Measured through the facade the API uses
(app/cluster/remote_index.py: scatter, merge under the tie rule), HTTP and encoders left out:

* while the IVF shards train (in the background, flat answering): searches keep coming back whole,
  their count and latency;
* after: one client p50/p99 (one query at a time, the least disturbed of 3 passes), 16 clients q/s,
  recall@10 against exact brute force (tie tolerant), for flat and for the IVF at its default nprobe
  and at 2x and 4x it (the per-query override, sent to every shard);
* each shard's windows, heap bytes, IVF lists and build seconds.

    python -m bench.cluster.index_kinds [--windows 400000] [--shards 2] [--queries 200]

Starts a throwaway PostgreSQL (tests/cluster/pg_server.py, fsync off) and a local Ray (2 CPUs). Writes
bench/results/cluster_index_kinds.json. The timed parts hold /tmp/recall-timing.lock with the shard
actors' threads at niceness 0.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.index import _audio_codes as audio_codes
from bench.index._measure import latencies, throughput, tie_tolerant_recall, timing_lock
from app.cluster.remote_index import RemoteCollectionIndex
from app.index import BinaryIndex, IndexSpec
from app.settings import Settings
from app.storage.records import Collection, NewItem
from bench.output import write_results

BITS, DIM, WINDOWS_PER_ITEM, K = 256, 8, 10, 10


def _ingest(catalog: Any, name: str, codes: np.ndarray, batch_items: int = 400) -> float:
    """Items of 10 windows (tiny random floats: this bench is about codes); returns windows/s."""
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    per_batch = batch_items * WINDOWS_PER_ITEM
    times = np.stack([np.arange(WINDOWS_PER_ITEM) * 0.5, np.arange(WINDOWS_PER_ITEM) * 0.5 + 1.0], axis=1)
    for first in range(0, len(codes), per_batch):
        block = codes[first:first + per_batch]
        floats = rng.standard_normal((len(block), DIM)).astype(np.float32)
        floats /= np.linalg.norm(floats, axis=1, keepdims=True)
        items = [NewItem(f"item-{(first + r) // WINDOWS_PER_ITEM}", None, None, None, {}, times,
                         floats[r:r + WINDOWS_PER_ITEM], block[r:r + WINDOWS_PER_ITEM])
                 for r in range(0, len(block), WINDOWS_PER_ITEM)]
        catalog.upsert_items(name, items)
    return len(codes) / (time.perf_counter() - start)


def _renice_actor(niceness: int):
    """A function for ``actor.__ray_call__``: every thread of the actor's process to ``niceness`` (not the IVF
    builder's, which sets its own, app/index/adaptive.py BUILD_NICENESS, when it starts)."""
    def run(_self: Any) -> None:
        for task in os.listdir("/proc/self/task"):
            try:
                os.setpriority(os.PRIO_PROCESS, int(task), niceness)
            except OSError:
                pass
    return run


def _measured(search: Any, queries: np.ndarray, true_d: np.ndarray) -> dict[str, Any]:
    stats, got_d, got_ids = latencies(search, queries, passes=3)
    return {**{k: round(v, 3) if isinstance(v, float) else [round(x, 3) for x in v] for k, v in stats.items()},
            "qps_16": round(throughput(search, queries)["qps"], 1),
            "recall_at_10": round(tie_tolerant_recall(true_d, got_d, got_ids), 4)}


def _during_build(remote: RemoteCollectionIndex, queries: np.ndarray, timeout_s: float) -> dict[str, Any]:
    """Search while the shards train their IVF, until all answer from it; every answer must be whole."""
    started = time.perf_counter()
    times, short, answering = [], 0, []
    while time.perf_counter() - started < timeout_s:
        for q in queries[:20]:
            t = time.perf_counter()
            _, ids = remote.binary.search(q[None, :], K)
            times.append((time.perf_counter() - t) * 1000)
            short += int((ids < 0).any())
        found = remote.describe_index()
        answering.append(found["answering"])
        if found["answering"] == "ivf" and not found["building"]:
            break
    return {"searches": len(times), "incomplete_answers": short, "p50_ms": round(float(np.median(times)), 3),
            "p99_ms": round(float(np.percentile(times, 99)), 3), "until_ivf_answers_s": round(time.perf_counter() - started, 1),
            "answering_seen": sorted(set(answering), key=answering.index)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, default=400_000)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data", type=Path, default=audio_codes.SHARED_DATA)
    parser.add_argument("--cache", type=Path, default=audio_codes.CACHE)
    parser.add_argument("--out", default="bench/results/cluster_index_kinds.json")
    args = parser.parse_args()

    import ray

    from app.storage.postgres import PostgresCatalog
    from tests.cluster.pg_server import PgServer

    windows_npz = audio_codes.embed_real_windows(args.data, args.cache)
    recipe = audio_codes.load_recipe(windows_npz)
    path = audio_codes.codes_file(recipe, windows_npz, args.windows, args.cache)
    codes = audio_codes.read_codes(path, BITS // 8, 0, args.windows)
    queries = np.ascontiguousarray(recipe.queries()[: args.queries])
    exact = BinaryIndex(BITS, shards=2)
    exact.add(np.arange(len(codes), dtype=np.int64), codes)
    true_d = exact.search(queries, K)[0]

    pg = PgServer().start()
    url = pg.new_database()
    ray.init(num_cpus=2, include_dashboard=False, namespace="recall", log_to_driver=False)
    results: dict[str, Any] = {}
    try:
        catalog = PostgresCatalog(url)
        settings = Settings(catalog_url=url, ray_address="auto", index_shards=args.shards, cluster={"shard_timeout_s": 120.0})
        remotes = {}
        for kind in ("flat", "ivf"):
            collection = Collection(kind, "audio", "bench", ("binary",), DIM, BITS, 1.0, 0.5, False, "", time.time(),
                                    index_spec=IndexSpec(kind))
            catalog.create_collection(collection)
            results[f"ingest_{kind}_windows_per_s"] = round(_ingest(catalog, kind, codes), 1)
            t = time.perf_counter()
            remotes[kind] = RemoteCollectionIndex.open(collection, settings)  # partitions built; an IVF starts training
            results[f"open_{kind}_s"] = round(time.perf_counter() - t, 2)
            remotes[kind].catch_up(catalog)
        results["during_ivf_build"] = _during_build(remotes["ivf"], queries, timeout_s=1800)
        shards = remotes["ivf"].describe_index()["shards"]
        results["ivf_shards"] = shards
        results["memory_bytes_per_shard"] = {k: [s["memory_bytes"] for s in r.shard_stats()] for k, r in remotes.items()}
        default = shards[0]["nprobe"]
        actors = [a for r in remotes.values() for a in r.actors]
        runs = []
        with timing_lock() as waited:
            ray.get([a.__ray_call__.remote(_renice_actor(0)) for a in actors])
            runs.append({"kind": "flat", "nprobe": None, **_measured(lambda q: remotes["flat"].binary.search(q, K), queries, true_d)})
            for nprobe in (default, 2 * default, 4 * default):
                search = (lambda p: lambda q: remotes["ivf"].binary.search(q, K, nprobe=p))(nprobe)
                runs.append({"kind": "ivf", "nprobe": nprobe, **_measured(search, queries, true_d)})
            ray.get([a.__ray_call__.remote(_renice_actor(19)) for a in actors])
        results["timing_lock_waited_s"] = round(waited, 1)
        results["runs"] = runs
        flat_p50 = runs[0]["p50_ms"]
        for run in runs:
            run["p50_speedup_vs_flat"] = round(flat_p50 / run["p50_ms"], 2)
        for remote in remotes.values():
            remote.delete_files()
        catalog.close()
    finally:
        ray.shutdown()
        pg.stop()
    out = {
        "what": f"binary top-{K} through {args.shards} Ray shard actors: flat vs IVF (index kinds on cluster shards)",
        "windows": args.windows, "bits": BITS, "shards": args.shards, "queries": len(queries),
        "codes": {**recipe.describe(), "rows": f"the first {args.windows} rows of the generated set"},
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average_end": os.getloadavg()},
        "note": "PostgreSQL, Ray, every shard and the client share this machine's 2 cores (shared with other jobs), so "
                "the scatter/merge round trip through Ray dominates small scans; index.auto_ivf_windows and ivf's "
                "10,000-window floor count each shard's partition",
        "results": results, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_results(out, args.out)


if __name__ == "__main__":
    main()
