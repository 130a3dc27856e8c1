"""Recovery from cluster faults under load: PostgreSQL restarted (fast, immediate) and the Ray head restarted.

The deployed shape on one machine: a Ray head started by `ray start --head` (tests/cluster/ray_head.py),
a throwaway PostgreSQL with fsync on (tests/cluster/pg_server.py), and one `recall serve` process
with its index on ``--shards`` shard actors. Two client threads run throughout, one ingesting
single files, one searching. Each fault is injected in turn: PostgreSQL stopped with ``pg_ctl -m
fast``, down ``--down-s`` seconds, started; the same with ``-m immediate`` (crash recovery); the Ray
head SIGKILLed, down ``--down-s``, started again on its address. Per fault: the answers by status
code inside the fault window, whether every non-200 was a 503 with Retry-After, and the recovery
time of each stream (from the moment the component is back until that stream's first 200). At
the end: every acknowledged ingest listed and found by search, and (joining the head) the
checker (app/cluster/consistency.py) comparing every shard with the catalog. Writes
bench/results/cluster_faults.json.

    python -m bench.cluster.faults [--down-s 2] [--shards 2]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.output import write_results


class Stream(threading.Thread):
    """One client sending ``send(n)`` until stopped: (n, status, Retry-After, monotonic time) per answer."""

    def __init__(self, send) -> None:
        super().__init__(daemon=True)
        self.send, self.answers, self.halt = send, [], threading.Event()

    def run(self) -> None:
        n = 0
        while not self.halt.is_set():
            try:
                response = self.send(n)
                self.answers.append((n, response.status_code, response.headers.get("retry-after"), time.monotonic()))
                if response.status_code != 200:
                    time.sleep(0.05)
            except httpx.HTTPError:
                self.answers.append((n, 0, None, time.monotonic()))
                time.sleep(0.05)
            n += 1


def _first_ok_after(stream: Stream, moment: float, seconds: float = 120.0) -> float | None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ok = [at for _, code, _, at in list(stream.answers) if code == 200 and at > moment]
        if ok:
            return round(ok[0] - moment, 3)
        time.sleep(0.02)
    return None


def _window(streams: dict[str, Stream], start: float, back: float) -> dict[str, object]:
    row: dict[str, object] = {}
    for name, stream in streams.items():
        inside = [a for a in stream.answers if start <= a[3]]
        codes: dict[str, int] = {}
        for _, code, _, _ in inside:
            codes[str(code)] = codes.get(str(code), 0) + 1
        refused = [a for a in inside if a[1] != 200]
        row[name] = {"codes_while_down": codes, "all_refusals_503_with_retry_after": all(a[1] == 503 and a[2] for a in refused),
                     "recovery_s": _first_ok_after(stream, back)}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--down-s", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--out", default="bench/results/cluster_faults.json")
    args = parser.parse_args()

    from tests.cluster.pg_server import PgServer
    from tests.cluster.ray_head import RayHead
    from tests.cluster.serve import serve
    from tests.conftest import tone_wav

    pg, head, api = PgServer(durable=True).start(), RayHead(cpus=4).start(), None
    root = Path(tempfile.mkdtemp(prefix="recall-faults-"))
    results: dict[str, object] = {}
    try:
        url = pg.new_database()
        api = serve(root / "data", url, **head.env(), RECALL_INDEX_SHARDS=str(args.shards),
                    RECALL_CLUSTER__SHARD_SNAPSHOT_S="2", RECALL_CLUSTER__SHARD_SNAPSHOT_DIR=str(root / "snaps"))
        client = httpx.Client(base_url=api.url, timeout=60)
        client.post("/v1/collections", json={"name": "w", "modality": "audio"})
        clips = {f"c{n}": tone_wav(120.0 + 7 * n, seconds=1.0) for n in range(3000)}
        probe = tone_wav(2500.0, seconds=1.0)
        client.post("/v1/collections/w/items", files={"files": ("p.wav", probe)}, data={"ids": "probe"})
        ingest = Stream(lambda n: client.post("/v1/collections/w/items", files={"files": (f"c{n}.wav", clips[f"c{n}"])},
                                              data={"ids": f"c{n}"}))
        search = Stream(lambda n: client.post("/v1/collections/w/search", files={"file": ("q.wav", probe)},
                                              data={"k": "3", "mode": "float"}))
        streams = {"ingest": ingest, "search": search}
        ingest.start()
        search.start()
        time.sleep(5)
        for fault in ("postgres_fast", "postgres_immediate", "ray_head"):
            start = time.monotonic()
            if fault == "ray_head":
                head.kill()
                head.proc.wait()
            else:
                pg.shut_down(fault.split("_")[1])
            time.sleep(args.down_s)
            if fault == "ray_head":
                head.start()
            else:
                pg.start_again()
            back = time.monotonic()
            row = {"component_back_after_s": round(back - start, 2), **_window(streams, start, back)}
            row["readyz_after"] = httpx.get(f"{api.url}/readyz").status_code
            results[fault] = row
            time.sleep(5)
        ingest.halt.set()
        search.halt.set()
        ingest.join()
        search.join()
        acknowledged = [f"c{n}" for n, code, _, _ in ingest.answers if code == 200]
        listed = {i["id"] for i in client.get("/v1/collections/w/items", params={"limit": 1000}).json()["data"]}
        offset = 1000
        while len(listed) == offset:
            listed |= {i["id"] for i in client.get("/v1/collections/w/items", params={"limit": 1000, "offset": offset}).json()["data"]}
            offset += 1000
        sample = acknowledged[:: max(1, len(acknowledged) // 20)]
        found = sum(1 for name in sample if client.post("/v1/collections/w/search", files={"file": ("q.wav", clips[name])},
                                                        data={"k": "1", "mode": "float"}).json()["results"][0]["id"] == name)
        results["acknowledged_ingests"] = len(acknowledged)
        results["acknowledged_lost"] = len(set(acknowledged) - listed)
        results["sample_found_by_search"] = f"{found}/{len(sample)}"
        results["api_process_restarted"] = api.proc.poll() is not None
        results["checker_differences"] = _check(url, head, args.shards)
    finally:
        if api is not None:
            api.kill()
        head.stop()
        pg.stop()
    out = {"what": __doc__.splitlines()[0], "down_s": args.down_s, "shards": args.shards,
           "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
           "note": "recovery_s: from the component being back (pg_ctl start -w returned; ray start --head printed its "
                   "start) to that client's first 200; PostgreSQL, Ray, the API and both clients share the machine's cores",
           "results": results, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_results(out, args.out)


def _check(url: str, head, shards: int) -> list[dict[str, object]]:
    """Join the (restarted) head and compare the service's shards with the catalog."""
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        os.environ.pop(name, None)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    from app.cluster.consistency import check_shards
    from app.cluster.remote_index import RemoteCollectionIndex
    from app.settings import Settings
    from app.storage.postgres import PostgresCatalog

    settings = Settings(catalog_url=url, ray_address=head.address, index_shards=shards, cluster={"node_ip": "127.0.0.1"})
    catalog = PostgresCatalog(url)
    return check_shards(catalog, RemoteCollectionIndex.open(catalog.get_collection("w"), settings))


if __name__ == "__main__":
    main()
