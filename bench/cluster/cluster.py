"""Cluster mode against the embedded mode, on this machine: index search and ingest.

Same synthetic data for both (random 256-bit codes and 128-d unit floats, 10 windows per item,
so the numbers are about storage and search, not an encoder):

* ``embedded``: SQLite catalog + the in-process index (what ``make serve`` runs);
* ``cluster_shards_{1,2,4}``: PostgreSQL catalog + that many Ray shard actors, searched through
  the same facade the API uses (scatter to every shard, merge under the tie rule).

Per configuration: binary (Hamming) top-10 search with one client (sequential queries) and
16 concurrent clients (threads), q/s and p50/p99 latency in ms, and the ratio to embedded;
ingest throughput (windows/s committed to the catalog and searchable). The per-shard scan rate
(windows scanned per second by one shard for one query) feeds the sizing model in the README.
The HTTP layer and the encoders are left out on purpose: bench/service/query_path.py measures those,
and they are the same in both modes.

    python -m bench.cluster.cluster [--windows 200000] [--queries 200]

Starts a throwaway PostgreSQL (tests/cluster/pg_server.py) and a local Ray (2 CPUs) unless
``--catalog-url`` / ``--ray-address`` are given. Writes bench/results/cluster.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from app.cluster.remote_index import RemoteCollectionIndex
from app.settings import Settings
from app.storage.catalog import Catalog
from app.storage.index_store import CollectionIndex
from app.storage.records import Collection, NewItem
from bench.output import write_results

BITS, DIM, WINDOWS_PER_ITEM, K = 256, 128, 10, 10


def _items(n_windows: int, seed: int = 0) -> list[NewItem]:
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n_windows // WINDOWS_PER_ITEM):
        floats = rng.standard_normal((WINDOWS_PER_ITEM, DIM)).astype(np.float32)
        floats /= np.linalg.norm(floats, axis=1, keepdims=True)
        codes = rng.integers(0, 256, (WINDOWS_PER_ITEM, BITS // 8), dtype=np.uint8)
        times = np.stack([np.arange(WINDOWS_PER_ITEM) * 0.5, np.arange(WINDOWS_PER_ITEM) * 0.5 + 1.0], axis=1)
        items.append(NewItem(f"item-{i}", None, None, None, {}, times, floats, codes))
    return items


def _ingest(catalog, items: list[NewItem], apply) -> float:
    """Commit in chunks of 16 items (the service's COMMIT_CHUNK); returns windows/s."""
    start = time.perf_counter()
    for i in range(0, len(items), 16):
        apply(catalog.upsert_items("c", items[i : i + 16]))
    return len(items) * WINDOWS_PER_ITEM / (time.perf_counter() - start)


def _latencies(search, queries: np.ndarray, clients: int) -> dict[str, float]:
    times: list[float] = []
    lock = threading.Lock()

    def client(rows: np.ndarray) -> None:
        mine = []
        for q in rows:
            t = time.perf_counter()
            search(q[None])
            mine.append(time.perf_counter() - t)
        with lock:
            times.extend(mine)

    parts = np.array_split(queries, clients)
    threads = [threading.Thread(target=client, args=(p,)) for p in parts]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    ms = np.asarray(times) * 1000
    return {"qps": round(len(queries) / wall, 1), "p50_ms": round(float(np.percentile(ms, 50)), 3),
            "p99_ms": round(float(np.percentile(ms, 99)), 3), "queries": len(queries)}


def _measure(search, queries: np.ndarray) -> dict[str, dict[str, float]]:
    search(queries[:1])  # warm up
    return {"one_client": _latencies(search, queries, 1), "clients_16": _latencies(search, queries, 16)}


def scan_rate(windows: int = 2_000_000, repeats: int = 30) -> dict[str, float]:
    """One shard's scan rate on this machine: 256-bit codes, one thread (a shard actor's scan)."""
    from app.index import BinaryIndex

    rng = np.random.default_rng(2)
    index = BinaryIndex(BITS, shards=1)
    index.add(np.arange(windows), rng.integers(0, 256, (windows, BITS // 8), dtype=np.uint8))
    queries = rng.integers(0, 256, (16, BITS // 8), dtype=np.uint8)
    index.search(queries[:1], K)
    one = []
    for _ in range(repeats):
        t = time.perf_counter()
        index.search(queries[:1], K)
        one.append(time.perf_counter() - t)
    batch = []
    for _ in range(max(3, repeats // 5)):
        t = time.perf_counter()
        index.search(queries, K)
        batch.append(time.perf_counter() - t)
    return {"windows": windows, "bytes_per_window_binary": index.memory_bytes() / windows,
            "one_query_ms": round(statistics.median(one) * 1000, 3),
            "one_query_windows_per_s": round(windows / statistics.median(one)),
            "batch16_ms": round(statistics.median(batch) * 1000, 3),
            "batch16_query_windows_per_s": round(16 * windows / statistics.median(batch))}


def sizing(rate: dict[str, float], overhead_ms: float, shard_memory_gb: float = 16.0) -> dict[str, object]:
    """Memory per shard and expected q/s at 10^8 and 10^9 windows x 256 bits (binary index only).

    A shard's one-query latency is its windows over the measured one-thread scan rate plus the
    measured scatter/merge overhead; with 16 concurrent clients the API's shared scan sends the
    16 queries as one batch, scanned at the measured batch rate. Shards run in parallel on
    their own nodes, so the slowest (largest) shard sets the latency.
    """
    out: dict[str, object] = {"assumes": f"shards of at most {shard_memory_gb} GB, one per node, one scan thread each; "
                              f"scatter/merge overhead {overhead_ms} ms measured here"}
    for total in (10**8, 10**9):
        rows = []
        for shards in (1, 2, 4, 8, 16, 32, 64):
            per_shard = total / shards
            memory_gb = per_shard * rate["bytes_per_window_binary"] / 1e9
            one_ms = per_shard / rate["one_query_windows_per_s"] * 1000 + overhead_ms
            batch_ms = per_shard * 16 / rate["batch16_query_windows_per_s"] * 1000 + overhead_ms
            rows.append({"shards": shards, "memory_gb_per_shard": round(memory_gb, 2), "fits": memory_gb <= shard_memory_gb,
                         "one_client_qps": round(1000 / one_ms, 1), "one_client_latency_ms": round(one_ms, 1),
                         "clients_16_qps": round(16 * 1000 / batch_ms, 1)})
        out[f"{total:.0e}"] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=200_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--shards", default="1,2,4")
    parser.add_argument("--catalog-url")
    parser.add_argument("--ray-address")
    parser.add_argument("--out", default="bench/results/cluster.json")
    args = parser.parse_args()

    import ray

    pg = None
    url = args.catalog_url
    if url is None:
        from tests.cluster.pg_server import PgServer

        pg = PgServer().start()
        url = pg.new_database()
    if args.ray_address:
        ray.init(address=args.ray_address, namespace="recall", log_to_driver=False)
    else:
        ray.init(num_cpus=2, include_dashboard=False, namespace="recall", log_to_driver=False)
    collection = Collection("c", "audio", "bench", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", time.time())
    items = _items(args.windows)
    queries = np.random.default_rng(1).integers(0, 256, (args.queries, BITS // 8), dtype=np.uint8)
    results: dict[str, object] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = Catalog(Path(tmp) / "catalog.sqlite3")
            sqlite.create_collection(collection)
            embedded = CollectionIndex.open(collection, sqlite, Path(tmp) / "indices", Settings().index.shards)
            ingest = _ingest(sqlite, items, embedded.apply)
            results["embedded"] = {"ingest_windows_per_s": round(ingest, 1), **_measure(lambda q: embedded.binary.search(q, K), queries)}
            sqlite.close()

        from app.storage.postgres import PostgresCatalog

        catalog = PostgresCatalog(url)
        catalog.create_collection(collection)
        # cluster ingest: PostgreSQL commit, then searchable once a shard replays it (measured with 2 shards)
        settings = Settings(catalog_url=url, ray_address="auto", index_shards=2)
        remote = RemoteCollectionIndex.open(collection, settings)
        ingest = _ingest(catalog, items, lambda w: remote.apply_shared(w, catalog))
        start = time.perf_counter()
        len(remote)  # the shards replay everything committed above
        replay_s = time.perf_counter() - start
        remote.delete_files()
        base = results["embedded"]
        for count in [int(s) for s in args.shards.split(",")]:
            settings = Settings(catalog_url=url, ray_address="auto", index_shards=count)
            start = time.perf_counter()
            remote = RemoteCollectionIndex.open(collection, settings)
            build_s = time.perf_counter() - start
            remote.catch_up(catalog)
            row = _measure(lambda q: remote.binary.search(q, K), queries)
            shard_stats = remote.shard_stats()
            one_query_s = row["one_client"]["p50_ms"] / 1000
            row.update({
                "ingest_windows_per_s": round(ingest, 1) if count == 2 else None,
                "replay_after_ingest_s": round(replay_s, 2) if count == 2 else None,
                "build_from_catalog_s": round(build_s, 2),
                "windows_per_shard": [s["segments"] for s in shard_stats],
                "memory_bytes_per_shard": [s["memory_bytes"] for s in shard_stats],
                # includes the scatter/merge round trip, so it understates the pure scan rate
                "per_shard_scan_windows_per_s": round(max(s["segments"] for s in shard_stats) / one_query_s),
                "ratio_to_embedded": {
                    "one_client_qps": round(row["one_client"]["qps"] / base["one_client"]["qps"], 3),
                    "clients_16_qps": round(row["clients_16"]["qps"] / base["clients_16"]["qps"], 3),
                    "one_client_p50": round(row["one_client"]["p50_ms"] / base["one_client"]["p50_ms"], 3),
                },
            })
            results[f"cluster_shards_{count}"] = row
            remote.delete_files()
        rate = scan_rate()
        results["shard_scan_rate"] = rate
        overhead = round(results["cluster_shards_1"]["one_client"]["p50_ms"] - results["embedded"]["one_client"]["p50_ms"], 3)
        results["sizing_model"] = sizing(rate, max(overhead, 0.5))
        embedded_one = results["embedded"]["one_client"]["p50_ms"] / 1000
        results["embedded"]["scan_windows_per_s"] = round(args.windows / embedded_one)
        results["cluster_ingest_ratio_to_embedded"] = round(ingest / results["embedded"]["ingest_windows_per_s"], 3)
    finally:
        ray.shutdown()
        if pg is not None:
            pg.stop()
    out = {
        "what": "binary top-10 search and ingest, embedded (SQLite + in-process index) vs cluster (PostgreSQL + Ray shards)",
        "windows": args.windows, "bits": BITS, "dim": DIM, "k": K, "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "note": "all shards, PostgreSQL, Ray and the client share this machine's cores; on a real cluster each shard has its own. "
                "The throwaway PostgreSQL runs with fsync=off (as in the tests), so cluster ingest is optimistic; SQLite "
                "(embedded) runs with synchronous=FULL as the service does",
        "results": results, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_results(out, args.out)


if __name__ == "__main__":
    main()
