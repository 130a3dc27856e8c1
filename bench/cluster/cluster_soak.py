"""Soak of cluster mode under faults: 16 clients of ingest and search, fault-free then with shard kills and a PostgreSQL restart.

The deployed shape on one machine: a throwaway PostgreSQL with fsync on (tests/cluster/pg_server.py),
a Ray head started by `ray start --head` (tests/cluster/ray_head.py), and ``--apis`` `recall serve`
processes with each collection on ``--shards`` Ray shard actors (snapshots every 10 s). Two arms in
one run, each on a fresh collection for ``--minutes``: the same load (bench/cluster/_soak_clients.py:
``--clients`` clients, single-file ingests of new ids and searches by acknowledged clips), first
without faults, then with faults on a schedule spread over the arm: ``--kills`` shard actors
SIGKILLed (Ray restarts them; they come back from their snapshot plus the catalog's tail) and one
PostgreSQL fast restart (``pg_ctl -m fast``, down ``--down-s``; ``--immediate`` adds an immediate
one, crash recovery). Per arm: p50/p99 of searches and ingests outside the fault windows, answers
by status inside and outside them, the recovery time of each fault, the resident memory of the API
and shard processes sampled every 2 s (slope per minute after the first tenth), and at the end:
every acknowledged ingest in the catalog, a sample of them found by search, the index's segment
count equal to the catalog's, and every shard equal to the catalog (app/cluster/consistency.py).
Writes bench/results/cluster_soak.json.

    nice -n 5 python -m bench.cluster.cluster_soak --minutes 30     # the issue's form (minutes per arm)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.cluster._soak_clients import Load, clip, close_windows, slope_mb_per_min, summarise

MARGIN_S = 2.0  # added to each fault window after the first successes
SAMPLE_EVERY_S = 2.0
P99_TARGET = 1.5  # p99 outside the windows, faults arm over fault-free arm
FLAT_MB_PER_MIN = 2.0  # "flat": under 60 MB over 30 minutes after warm-up


# --- memory ---------------------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2:].split()[1])


def shard_pids(head_pid: int) -> list[int]:
    """This run's shard processes: Ray names an actor's worker after its class (``ray::ShardActor`` in its
    command line), and ours descend from our head's `ray start` (other runs on the machine have shards too)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if not (entry / "cmdline").read_bytes().startswith(b"ray::ShardActor"):
                    continue
                pid = int(entry.name)
                for _ in range(16):
                    pid = _parent(pid)
                    if pid in (head_pid, 0, 1):
                        break
                if pid == head_pid:
                    pids.append(int(entry.name))
            except (OSError, ValueError):
                continue
    return pids


class Sampler(threading.Thread):
    """(monotonic time, API processes' MB, shard processes' MB, shard processes) every ``SAMPLE_EVERY_S``."""

    def __init__(self, api_pids: list[int], head_pid: int) -> None:
        super().__init__(daemon=True)
        self.api_pids, self.head_pid, self.samples, self.halt = api_pids, head_pid, [], threading.Event()

    def run(self) -> None:
        while not self.halt.wait(SAMPLE_EVERY_S):
            shards = shard_pids(self.head_pid)
            self.samples.append((time.monotonic(), sum(rss_mb(p) for p in self.api_pids),
                                 sum(rss_mb(p) for p in shards), len(shards)))

    def between(self, start: float, end: float) -> dict[str, Any]:
        rows = [s for s in self.samples if start <= s[0] <= end]
        if not rows:
            return {}
        out: dict[str, Any] = {"samples": len(rows), "every_s": SAMPLE_EVERY_S}
        for column, name in ((1, "api_rss_mb"), (2, "shards_rss_mb")):
            series = [(s[0] - start, s[column]) for s in rows]
            out[name] = {"start": round(rows[0][column], 1), "end": round(rows[-1][column], 1),
                         "max": round(max(s[column] for s in rows), 1), "slope_mb_per_min": slope_mb_per_min(series)}
        out["shard_processes"] = sorted({s[3] for s in rows})
        step = max(1, len(rows) // 40)
        out["series_t_api_shards"] = [[round(s[0] - start), round(s[1]), round(s[2])] for s in rows[::step]]
        return out


# --- faults -----------------------------------------------------------------------------------------


def plan(seconds: float, kills: int, immediate: bool) -> list[tuple[float, str]]:
    """Faults spread evenly over the arm's middle (10% to 85%), the PostgreSQL restarts among the kills."""
    kinds = ["shard_kill"] * kills
    kinds.insert(len(kinds) // 2, "postgres_fast")
    if immediate:
        kinds.insert(len(kinds) * 3 // 4 + 1, "postgres_immediate")
    span = 0.75 * seconds
    return [(round(0.10 * seconds + span * i / max(1, len(kinds) - 1), 1), kind) for i, kind in enumerate(kinds)]


class Injector:
    """Does one fault; returns (start, back, details) on the monotonic clock."""

    def __init__(self, pg: Any, down_s: float) -> None:
        self.pg, self.down_s, self.actors = pg, down_s, []

    def __call__(self, kind: str, number: int) -> tuple[float, float, dict[str, Any]]:
        if kind == "shard_kill":
            import ray

            shard = number % len(self.actors)
            pid = ray.get(self.actors[shard].pid.remote(), timeout=60)
            start = time.monotonic()
            os.kill(pid, signal.SIGKILL)  # a crash: Ray restarts the actor
            return start, start, {"shard": shard + 1}
        start = time.monotonic()
        self.pg.shut_down(kind.split("_")[1])
        time.sleep(self.down_s)
        self.pg.start_again()
        return start, time.monotonic(), {}


# --- one arm ------------------------------------------------------------------------------------------


async def run_arm(name: str, urls: list[str], seconds: float, clients: int, ingest_share: float,
                  faults_plan: list[tuple[float, str]], injector: Injector, open_shards) -> tuple[Load, dict[str, Any]]:
    load = Load(name)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    https = [httpx.AsyncClient(base_url=url, timeout=120, limits=limits) for url in urls]
    try:
        created = await https[0].post("/v1/collections", json={"name": name, "modality": "audio"})
        created.raise_for_status()
        first = await https[0].post(f"/v1/collections/{name}/items", files={"files": ("p.wav", clip(f"{name}-probe"))},
                                    data={"ids": f"{name}-probe"})
        first.raise_for_status()
        load.acknowledged.append(f"{name}-probe")
        injector.actors = (await asyncio.to_thread(open_shards, name)).actors
        loop = asyncio.get_running_loop()
        start = loop.time()
        faults: list[dict[str, Any]] = []

        async def scheduler() -> None:
            for number, (offset, kind) in enumerate(faults_plan):
                await asyncio.sleep(max(0.0, start + offset - loop.time()))
                began, back, details = await asyncio.to_thread(injector, kind, number)
                faults.append({"kind": kind, "start": began, "back": back, **details})

        await asyncio.gather(scheduler(), *(load.client(n, https[n % len(https)], start + seconds, ingest_share)
                                            for n in range(clients)))
        end = loop.time()
    finally:
        for http in https:
            await http.aclose()
    close_windows(faults, load.answers, end, MARGIN_S)
    row = summarise(load, faults, start, end)
    row["seconds"] = round(end - start, 1)
    row["faults"] = [{"kind": f["kind"], "at_s": round(f["start"] - start, 1), **({"shard": f["shard"]} if "shard" in f else {}),
                      "component_back_after_s": round(f["back"] - f["start"], 2), "recovery_s": f["recovery_s"],
                      "window_s": round(f["end"] - f["start"], 1)} for f in faults]
    row["_span"] = (start, end)
    return load, row


def verify(load: Load, url: str, catalog: Any, shards: Any, search_sample: int) -> dict[str, Any]:
    """Every acknowledged write in the catalog, a sample found by search, index and shards equal to the catalog."""
    from app.cluster.consistency import check_shards

    stored: set[str] = set()
    for i in range(0, len(load.acknowledged), 1000):
        stored |= set(catalog.items_by_id(load.collection, load.acknowledged[i:i + 1000]))
    lost = [item for item in load.acknowledged if item not in stored]
    step = max(1, len(load.acknowledged) // max(1, search_sample))
    sample = sorted(set(load.acknowledged[::step][:search_sample] + load.acknowledged[-5:]))
    not_found = []
    with httpx.Client(base_url=url, timeout=120) as http:
        for item in sample:
            answer = http.post(f"/v1/collections/{load.collection}/search", files={"file": ("q.wav", clip(item))},
                               data={"k": "5"})
            if answer.status_code != 200 or item not in [r["id"] for r in answer.json()["results"]]:
                not_found.append(item)
        stats = http.get(f"/v1/collections/{load.collection}").json()
    return {"acknowledged_writes": len(load.acknowledged), "acknowledged_lost": len(lost), "lost_examples": lost[:10],
            "uncertain_writes": len(load.uncertain), "catalog_items": stats["items"],
            "searched_for": len(sample), "not_found_by_search": not_found[:10], "found_by_search": len(sample) - len(not_found),
            "index_segments_equal_catalog": stats["segments"] == stats["indexed_segments"],
            "shard_checker_differences": check_shards(catalog, shards)}


# --- the run --------------------------------------------------------------------------------------------


def run(minutes: float, clients: int = 16, apis: int = 1, shards: int = 2, kills: int | None = None,
        immediate: bool = False, down_s: float = 2.0, ingest_share: float = 0.5, search_sample: int = 400,
        out: Path | None = None, tamper=None) -> dict[str, Any]:
    """Both arms; ``tamper(loads)`` (tests only) may edit the loads before they are verified."""
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        os.environ.pop(name, None)
    os.environ["RAY_AUTH_MODE"] = "disabled"  # the head below runs without token authentication
    from app.cluster.remote_index import RemoteCollectionIndex
    from app.settings import Settings
    from app.storage.postgres import PostgresCatalog
    from tests.cluster.pg_server import PgServer
    from tests.cluster.ray_head import RayHead
    from tests.cluster.serve import serve

    seconds = minutes * 60
    kills = max(2, int(minutes // 2)) if kills is None else kills
    faults_plan = plan(seconds, kills, immediate)
    root = Path(tempfile.mkdtemp(prefix="recall-csoak-"))
    pg, head, served = PgServer(durable=True).start(), None, []
    load_start = os.getloadavg()
    try:
        head = RayHead(cpus=4).start()
        url = pg.new_database()
        env = {**head.env(), "RECALL_INDEX_SHARDS": str(shards), "RECALL_CLUSTER__SHARD_SNAPSHOT_S": "10",
               "RECALL_CLUSTER__SHARD_SNAPSHOT_DIR": str(root / "snaps"), "RECALL_LOG_LEVEL": "warning"}
        served = [serve(root / "data", url, timeout=180, **env) for _ in range(apis)]
        urls = [s.url for s in served]
        settings = Settings(catalog_url=url, ray_address=head.address, index_shards=shards, cluster={"node_ip": "127.0.0.1"})
        catalog = PostgresCatalog(url)
        from app.cluster.ray_runtime import ensure_ray

        ensure_ray(settings.ray_address, settings.cluster)  # joined here, in the main thread, before the arms

        def open_shards(name: str) -> Any:
            return RemoteCollectionIndex.open(catalog.get_collection(name), settings)

        sampler = Sampler([s.proc.pid for s in served], head.proc.pid)
        sampler.start()
        injector = Injector(pg, down_s)
        # unmeasured warm-up on a collection of its own: the encoders' and allocators' first requests
        asyncio.run(run_arm("soak-warmup", urls, min(60.0, 0.2 * seconds), clients, ingest_share, [], injector, open_shards))
        arms, loads = {}, {}
        for arm, schedule in (("fault_free", []), ("faults", faults_plan)):
            load_before = os.getloadavg()[0]
            loads[arm], arms[arm] = asyncio.run(run_arm(f"soak-{arm.replace('_', '-')}", urls, seconds, clients,
                                                        ingest_share, schedule, injector, open_shards))
            arms[arm]["memory"] = sampler.between(*arms[arm].pop("_span"))
            arms[arm]["load_avg_1min_start_end"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        sampler.halt.set()
        if tamper is not None:
            tamper(loads)
        for arm, load in loads.items():
            arms[arm]["verification"] = verify(load, urls[0], catalog, open_shards(load.collection), search_sample)
        arms["faults"]["api_processes_restarted"] = sum(1 for s in served if s.proc.poll() is not None)
        catalog.close()
    finally:
        for s in served:
            s.kill()
        if head is not None:
            head.stop()
        pg.stop()
    result = {
        "what": __doc__.splitlines()[0],
        "command": "nice -n 5 python -m bench.cluster.cluster_soak " + " ".join(
            [f"--minutes {minutes:g}"] + [f"--{k} {v}" for k, v in (("apis", apis), ("shards", shards), ("clients", clients))
                                          if v != {"apis": 1, "shards": 2, "clients": 16}[k]] + ["--immediate"] * immediate),
        "config": {"minutes_per_arm": minutes, "clients": clients, "api_processes": apis, "shards": shards,
                   "ingest_share": ingest_share, "clip_s": 0.5, "encoder": "audio-baseline", "down_s": down_s,
                   "window_margin_s": MARGIN_S, "shard_snapshot_s": 10,
                   "warmup_s": min(60.0, 0.2 * seconds), "schedule": [{"at_s": o, "kind": k} for o, k in faults_plan]},
        "note": note(minutes), "arms": arms, "targets": targets(arms),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1_5_15_start": [round(x, 2) for x in load_start],
                    "load_avg_1_5_15_end": [round(x, 2) for x in os.getloadavg()]},
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def note(minutes: float) -> str:
    shortened = (f"{minutes:g} minutes per arm, not the issue's 30 (the same command with --minutes 30 runs that); "
                 if minutes < 30 else "")
    return (shortened + "PostgreSQL, the Ray head, the shards, the API processes and the 16 clients share this machine's "
            "cores with other jobs (load averages below and per arm), so the milliseconds are inflated; the two arms "
            "run one after the other in the same run, so their ratio is the figure to read")


def targets(arms: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with the measured figure beside it."""
    free, faulty = arms["fault_free"], arms["faults"]
    ratios = {}
    for op in ("search", "ingest"):
        a, b = free[op]["outside_windows"].get("p99_ms"), faulty[op]["outside_windows"].get("p99_ms")
        ratios[op] = round(b / a, 2) if a and b else None
    lost = sum(arm.get("verification", {}).get("acknowledged_lost", 0) for arm in arms.values())
    slopes = {arm: {k: v["memory"].get(k, {}).get("slope_mb_per_min") for k in ("api_rss_mb", "shards_rss_mb")}
              for arm, v in arms.items()}
    free_api = slopes["fault_free"]["api_rss_mb"]
    clean = all(arm.get("verification", {}).get("shard_checker_differences") == [] and
                arm.get("verification", {}).get("index_segments_equal_catalog") and
                not arm.get("verification", {}).get("not_found_by_search") for arm in arms.values())
    return {
        "acknowledged_lost": lost, "zero_lost": lost == 0,
        "p99_outside_windows_ratio_faults_to_free": ratios,
        "p99_within_1_5x": all(r is not None and r <= P99_TARGET for r in ratios.values()),
        "memory_slope_mb_per_min": slopes, "flat_limit_mb_per_min": FLAT_MB_PER_MIN,
        "api_memory_flat": free_api is not None and abs(free_api) <= FLAT_MB_PER_MIN and
                           abs(slopes["faults"]["api_rss_mb"] or 0) <= FLAT_MB_PER_MIN,
        "server_errors_500": sum(arm["server_errors_500"] for arm in arms.values()),
        "refusals_only_503_with_retry_after": all(arm["refusals_all_503_with_retry_after"] for arm in arms.values()),
        "refusals_outside_windows": sum(arm["refusals_outside_windows"] for arm in arms.values()),
        "shards_and_search_agree_with_catalog": clean,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="per arm")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--apis", type=int, default=1, help="recall serve processes (clients spread over them)")
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--kills", type=int, help="shard kills in the faults arm (default: one per 2 minutes, at least 2)")
    parser.add_argument("--immediate", action="store_true", help="add a PostgreSQL immediate shutdown (crash recovery)")
    parser.add_argument("--down-s", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=Path("bench/results/cluster_soak.json"))
    args = parser.parse_args()
    result = run(args.minutes, args.clients, args.apis, args.shards, args.kills, args.immediate, args.down_s, out=args.out)
    print(json.dumps({"targets": result["targets"], **{arm: {op: row[op]["outside_windows"] for op in ("search", "ingest")}
                                                        for arm, row in result["arms"].items()}}, indent=2))


if __name__ == "__main__":
    main()
