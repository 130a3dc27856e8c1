"""A killed index shard actor: restart from its snapshot plus the catalog's tail vs a full rebuild from PostgreSQL.

One collection of ``--windows`` windows (random 256-bit codes and 128-d unit floats, 10 windows per
item, binary and float indices, as bench/cluster/cluster.py) in a throwaway PostgreSQL, on
``--shards`` Ray shard actors (1 by default: the whole 10^6 windows behind one actor). Then:

* **snapshot + tail**: each shard writes its snapshot (timed), ``--tail`` more windows are
  committed (new items, replaced items and deleted ones), and a shard actor is killed
  (``ray.kill``; Ray restarts it) ``--repeats`` times; the restart time is from the kill until the
  restarted actor answers a search-ready ``sync`` at the catalog's latest sequence;
* **full rebuild**: the same with snapshots off (``shard_snapshot_s=0``), which is what every
  restart did before shard snapshots: the whole partition read from PostgreSQL.

Both in one run, so the ratio is measured on the same machine state. After each restart the
checker (app/cluster/consistency.py) compares every shard with the catalog once per mode and must
find no difference. Writes bench/results/shard_restart.json.

    flock /tmp/recall-timing.lock python -m bench.cluster.shard_restart [--windows 1000000] [--tail 10000]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from app.cluster.consistency import check_shards
from app.cluster.ray_runtime import NAMESPACE
from app.cluster.remote_index import RemoteCollectionIndex, actor_name
from app.settings import Settings
from app.storage.records import Collection, NewItem
from bench.output import write_results

BITS, DIM, WINDOWS_PER_ITEM = 256, 128, 10
CHUNK_ITEMS = 1000  # items per catalog transaction while loading (10^4 windows)


def _items(first: int, count: int, seed: int) -> list[NewItem]:
    rng = np.random.default_rng(seed)
    times = np.stack([np.arange(WINDOWS_PER_ITEM) * 0.5, np.arange(WINDOWS_PER_ITEM) * 0.5 + 1.0], axis=1)
    out = []
    for i in range(first, first + count):
        floats = rng.standard_normal((WINDOWS_PER_ITEM, DIM)).astype(np.float32)
        floats /= np.linalg.norm(floats, axis=1, keepdims=True)
        codes = rng.integers(0, 256, (WINDOWS_PER_ITEM, BITS // 8), dtype=np.uint8)
        out.append(NewItem(f"item-{i}", None, None, None, {}, times, floats, codes))
    return out


def _load(catalog, items: int) -> float:
    start = time.perf_counter()
    for first in range(0, items, CHUNK_ITEMS):
        catalog.upsert_items("c", _items(first, min(CHUNK_ITEMS, items - first), seed=first))
    return time.perf_counter() - start


def _tail(catalog, items: int, windows: int) -> dict[str, int]:
    """``windows`` more windows: two thirds new items, one third replacing existing ones, plus as many deletes."""
    count = max(3, windows // WINDOWS_PER_ITEM)
    new, replaced = count * 2 // 3, count - count * 2 // 3
    catalog.upsert_items("c", _items(items, new, seed=10**7))
    catalog.upsert_items("c", _items(0, replaced, seed=10**7 + 1))  # item-0.. get new vectors
    for i in range(replaced, 2 * replaced):
        catalog.delete_item("c", f"item-{i}")
    return {"new_items": new, "replaced_items": replaced, "deleted_items": replaced,
            "windows_written": (new + replaced) * WINDOWS_PER_ITEM}


def _restart(remote: RemoteCollectionIndex, catalog, number: int) -> dict[str, float]:
    """Kill shard ``number``; seconds until the restarted actor has replayed to the catalog's latest sequence."""
    import ray

    actor = remote.actors[number]
    old = ray.get(actor.pid.remote())
    target = catalog.last_seq("c")
    start = time.perf_counter()
    ray.kill(actor, no_restart=False)
    while True:
        try:
            stats = ray.get(actor.sync.remote(target), timeout=1800)
            if stats["pid"] != old:
                break
        except Exception:  # noqa: BLE001 - dead or restarting: ask again
            time.sleep(0.02)
    return {"restart_s": round(time.perf_counter() - start, 3), "opened": stats["opened"]}


def _mode(url: str, catalog, collection: Collection, shards: int, snapshot_s: float, folder: str, repeats: int,
          tail_windows: int, items: int) -> dict[str, object]:
    settings = Settings(catalog_url=url, ray_address="auto", index_shards=shards,
                        cluster={"shard_snapshot_dir": folder, "shard_snapshot_s": snapshot_s})
    start = time.perf_counter()
    remote = RemoteCollectionIndex.open(collection, settings)
    row: dict[str, object] = {"first_open_s": round(time.perf_counter() - start, 3)}
    import ray

    if snapshot_s > 0:
        start = time.perf_counter()
        ray.get([a.snapshot.remote() for a in remote.actors])
        row["snapshot_write_s"] = round(time.perf_counter() - start, 3)
        row["snapshot_bytes"] = sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file())
    if tail_windows:
        row["tail"] = _tail(catalog, items, tail_windows)
    remote.catch_up(catalog)
    runs = [_restart(remote, catalog, n % shards) for n in range(repeats)]
    row["restarts"] = runs
    row["restart_s_median"] = round(statistics.median(r["restart_s"] for r in runs), 3)
    row["in_actor_open_s_median"] = round(statistics.median(r["opened"]["seconds"] for r in runs), 3)
    start = time.perf_counter()
    row["checker_differences"] = check_shards(catalog, remote)
    row["checker_s"] = round(time.perf_counter() - start, 2)
    row["windows_per_shard"] = [s["segments"] for s in remote.shard_stats()]
    remote.delete_files()
    names = [actor_name(url, collection, n, shards) for n in range(shards)]
    while any(_named(name) for name in names):  # the kill is asynchronous: let the names go before reusing them
        time.sleep(0.1)
    return row


def _named(name: str) -> bool:
    import ray

    try:
        ray.get_actor(name, namespace=NAMESPACE)
        return True
    except ValueError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--windows", type=int, default=1_000_000)
    parser.add_argument("--tail", type=int, default=10_000, help="windows written after the snapshot")
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench/results/shard_restart.json")
    args = parser.parse_args()

    import ray

    from app.storage.postgres import PostgresCatalog
    from tests.cluster.pg_server import PgServer

    pg = PgServer().start()
    ray.init(num_cpus=2, include_dashboard=False, namespace="recall", log_to_driver=False)
    results: dict[str, object] = {}
    try:
        url = pg.new_database()
        catalog = PostgresCatalog(url)
        collection = Collection("c", "audio", "bench", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", time.time())
        catalog.create_collection(collection)
        items = args.windows // WINDOWS_PER_ITEM
        results["load_s"] = round(_load(catalog, items), 1)
        with tempfile.TemporaryDirectory(prefix="recall-shard-snaps-") as folder:
            # the tail is written once (in the snapshot mode); the full rebuild then reads the same catalog
            results["snapshot_and_tail"] = _mode(url, catalog, collection, args.shards, 3600.0, folder, args.repeats,
                                                 args.tail, items)
            results["full_rebuild"] = _mode(url, catalog, collection, args.shards, 0.0, folder, args.repeats, 0, items)
        results["restart_speedup"] = round(results["full_rebuild"]["restart_s_median"] /
                                           results["snapshot_and_tail"]["restart_s_median"], 1)
        catalog.close()
    finally:
        ray.shutdown()
        pg.stop()
    out = {
        "what": "restart time of a killed index shard actor: its snapshot plus the catalog's tail vs a full rebuild "
                "from PostgreSQL (kill until the restarted actor has replayed to the latest write)",
        "windows": args.windows, "bits": BITS, "dim": DIM, "index_kinds": ["binary", "float"], "shards": args.shards,
        "tail_windows": args.tail, "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "note": "PostgreSQL, Ray, the shard and the client share this machine's cores; the throwaway PostgreSQL runs "
                "with fsync=off (reads are what a restart does). restart_s includes Ray starting the actor's process; "
                "in_actor_open_s is the shard's own __init__ (snapshot load + tail replay + row-count check, or the "
                "whole partition read).",
        "results": results, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_results(out, args.out)


if __name__ == "__main__":
    main()
