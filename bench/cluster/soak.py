"""Long mixed load against the real service on loopback, checked against a model of what it must hold.

``clients`` concurrent clients (16 by default) ingest, upsert, delete, search and follow ingest jobs
for ``seconds`` (600 by default) or ``max_requests`` requests, whichever ends first. Each client owns
the ids it writes, so its operations on an id are serialised and the model it keeps is exact: an
acknowledged write (200, or 202 for a job, once the job reports the file indexed) must be present
with its last metadata version; an acknowledged delete (204) must be absent. At the end the
collection's listing is compared with the model item by item, and the index's segment count with
the catalog's. Meanwhile the server process's resident memory and open file descriptors are
sampled every second from /proc.

The server is a separate process (uvicorn on a socket bound here to 127.0.0.1), so its RSS is its
own. Writes bench/results/soak.json. tests/reliability/test_soak.py runs a short version and
asserts correctness only (model equality, no 5xx, no descriptor leak), never speed.

    python -m bench.cluster.soak                      # 16 clients, 10 minutes, at most 200000 requests
    python -m bench.cluster.soak --seconds 30 --max-requests 500 --out /tmp/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import soundfile as sf

COLLECTION = "soak"
OPS = {"ingest": 0.25, "upsert": 0.15, "delete": 0.10, "search": 0.35, "job": 0.10, "list": 0.05}
RSS_GROWTH_LIMIT_MB = 256.0  # past warm-up; a leak of a few kB per request over 10 minutes shows well above it
FD_GROWTH_LIMIT = 16  # measured with every client disconnected: a per-request leak grows without bound


def _tone(freq: float, seconds: float = 0.5, rate: int = 16000) -> bytes:
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format="WAV")
    return buf.getvalue()


CLIPS = [_tone(220.0 * 2 ** (n / 12)) for n in range(32)]


# --- the server -----------------------------------------------------------------------------


class Server:
    """``uvicorn --factory app.main:create_app`` on a loopback socket bound here (no port race)."""

    def __init__(self, data_dir: Path) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        env = {**os.environ, "RECALL_DATA_DIR": str(data_dir), "RECALL_ENCODERS__DEFAULT_AUDIO": "audio-baseline",
               "RECALL_ENCODERS__DEFAULT_IMAGE": "image-baseline", "RECALL_LOG_LEVEL": "warning",
               "RECALL_LIMITS__SYNC_INGEST_FILES": "4", "HF_HUB_OFFLINE": "1"}
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--fd", str(self.sock.fileno()),
             "--log-level", "warning"],
            env=env, cwd=root, pass_fds=(self.sock.fileno(),))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited during startup (code {self.process.returncode})")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"the service was not ready within {timeout} s")

    def sample(self) -> tuple[float, int]:
        """(resident MB, open file descriptors) of the server process."""
        pid = self.process.pid
        rss_kb = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if line.startswith("VmRSS:"))
        return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.sock.close()


# --- the clients ----------------------------------------------------------------------------


@dataclass
class Run:
    deadline: float
    max_requests: int
    sent: int = 0
    statuses: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    latency_ms: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    unexpected: list[str] = field(default_factory=list)
    uncertain: set[str] = field(default_factory=set)  # a write whose answer never came: either state is right
    deleted: set[str] = field(default_factory=set)

    def more(self) -> bool:
        return time.monotonic() < self.deadline and self.sent < self.max_requests

    async def call(self, http: httpx.AsyncClient, op: str, method: str, path: str, **kwargs: Any) -> httpx.Response | None:
        self.sent += 1
        started = time.perf_counter()
        try:
            response = await http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            self.statuses[op][type(exc).__name__] += 1
            return None
        self.latency_ms[op].append((time.perf_counter() - started) * 1000)
        self.statuses[op][response.status_code] += 1
        return response

    def note(self, op: str, response: httpx.Response | None, expected: tuple[int, ...]) -> bool:
        """True when the answer is one of ``expected``; a 429 is back-pressure, anything else is recorded."""
        if response is None or response.status_code in expected:
            return response is not None
        if response.status_code != 429 and len(self.unexpected) < 50:
            self.unexpected.append(f"{op}: {response.status_code} {response.text[:200]}")
        return False


async def client(n: int, http: httpx.AsyncClient, run: Run, model: dict[str, int]) -> None:
    """One client: its own ids (c<n>-<seq>), so the model of them it keeps is exact."""
    rng = random.Random(n)
    seq = 0
    mine: list[str] = []
    ops, weights = list(OPS), list(OPS.values())
    while run.more():
        op = rng.choices(ops, weights)[0]
        if op in ("upsert", "delete") and not mine:
            op = "ingest"
        if op == "ingest" or op == "upsert":
            if op == "ingest":
                seq += 1
                item = f"c{n}-{seq}"
            else:
                item = rng.choice(mine)
            version = model.get(item, 0) + 1
            response = await run.call(http, op, "POST", f"/v1/collections/{COLLECTION}/items",
                                      files=[("files", (f"{item}.wav", rng.choice(CLIPS)))],
                                      data={"ids": item, "metadata": json.dumps({"owner": n, "v": version})})
            if response is None:
                run.uncertain.add(item)
            elif run.note(op, response, (200,)):
                if item not in model:
                    mine.append(item)
                model[item] = version
        elif op == "delete":
            item = mine.pop(rng.randrange(len(mine)))
            response = await run.call(http, op, "DELETE", f"/v1/collections/{COLLECTION}/items/{item}")
            if response is None:
                run.uncertain.add(item)
            elif run.note(op, response, (204,)):
                del model[item]
                run.deleted.add(item)
            else:
                mine.append(item)  # refused (429): still there
        elif op == "search":
            if mine and rng.random() < 0.5:
                response = await run.call(http, op, "POST", f"/v1/collections/{COLLECTION}/search",
                                          json={"item_id": rng.choice(mine), "k": 5})
            else:
                response = await run.call(http, op, "POST", f"/v1/collections/{COLLECTION}/search",
                                          files=[("file", ("q.wav", rng.choice(CLIPS)))], data={"k": "5"})
            run.note(op, response, (200,))
        elif op == "job":
            items = [f"c{n}-{seq + 1}", f"c{n}-{seq + 2}"]
            seq += 2
            files = [("files", (f"{item}.wav", rng.choice(CLIPS))) for item in items]
            response = await run.call(http, op, "POST", f"/v1/collections/{COLLECTION}/items?wait=false", files=files,
                                      data={"ids": ",".join(items), "metadata": json.dumps([{"owner": n, "v": 1}] * 2)})
            if response is None:
                run.uncertain.update(items)
            elif run.note(op, response, (202,)):
                await follow_job(http, run, response.json()["id"], items, model, mine)
        else:
            offset = rng.randrange(max(1, len(model)))
            response = await run.call(http, op, "GET", f"/v1/collections/{COLLECTION}/items", params={"limit": 50, "offset": offset})
            run.note(op, response, (200,))


async def follow_job(http: httpx.AsyncClient, run: Run, job_id: str, items: list[str], model: dict[str, int], mine: list[str]) -> None:
    """Poll the job to its end (past the run's deadline if need be: it was acknowledged)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        response = await run.call(http, "job_poll", "GET", f"/v1/jobs/{job_id}")
        if response is not None and run.note("job_poll", response, (200,)):
            job = response.json()
            if job["status"] in ("completed", "failed"):
                refused = {e.get("filename") for e in job.get("errors") or []}
                for item in items:
                    if f"{item}.wav" not in refused and job["status"] == "completed":
                        model[item] = 1
                        mine.append(item)
                if job["status"] == "failed" or refused:
                    run.unexpected.append(f"job {job_id}: {job['status']} {job.get('errors')}")
                return
        await asyncio.sleep(0.2)
    run.uncertain.update(items)
    run.unexpected.append(f"job {job_id} did not finish within 120 s")


# --- the check ------------------------------------------------------------------------------


async def final_state(http: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every item (id -> metadata) by paging the listing, and the collection's stats."""
    items: dict[str, Any] = {}
    offset = 0
    while True:
        page = (await http.get(f"/v1/collections/{COLLECTION}/items", params={"limit": 1000, "offset": offset})).json()
        for item in page["data"]:
            items[item["id"]] = item.get("metadata") or {}
        offset += len(page["data"])
        if not page["data"] or offset >= page["count"]:
            break
    stats = (await http.get(f"/v1/collections/{COLLECTION}")).json()
    return items, stats


def compare(model: dict[str, int], items: dict[str, Any], stats: dict[str, Any], run: Run) -> dict[str, Any]:
    certain = {k: v for k, v in model.items() if k not in run.uncertain}
    present = {k: v for k, v in items.items() if k not in run.uncertain}
    missing = sorted(set(certain) - set(present))
    extra = sorted(set(present) - set(certain))
    stale = sorted(k for k in set(certain) & set(present) if present[k].get("v") != certain[k])
    resurrected = sorted(run.deleted & set(present))
    return {
        "model_items": len(model), "service_items": len(items), "uncertain": len(run.uncertain),
        "missing": missing[:20], "extra": extra[:20], "stale": stale[:20], "deleted_but_present": resurrected[:20],
        "segments": stats["segments"], "indexed_segments": stats["indexed_segments"],
        "matches_model": not (missing or extra or stale or resurrected),
        "index_matches_catalog": stats["segments"] == stats["indexed_segments"] and stats["items"] == len(items),
    }


async def _load(url: str, clients: int, seconds: float, max_requests: int, server: Server) -> dict[str, Any]:
    samples: list[tuple[float, float, int]] = []

    async def sampler() -> None:
        start = time.monotonic()
        while True:
            rss, fds = server.sample()
            samples.append((time.monotonic() - start, rss, fds))
            await asyncio.sleep(1.0)

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        created = await http.post("/v1/collections", json={"name": COLLECTION, "modality": "audio"})
        created.raise_for_status()
        run = Run(deadline=time.monotonic() + seconds, max_requests=max_requests)
        model: dict[str, int] = {}
        sampling = asyncio.create_task(sampler())
        started = time.perf_counter()
        await asyncio.gather(*(client(n, http, run, model) for n in range(clients)))
        wall = time.perf_counter() - started
        await asyncio.sleep(1.0)  # one more sample once the load has stopped
        sampling.cancel()
        items, stats = await final_state(http)
    await asyncio.sleep(0.5)  # the clients' connections are closed: what is still open now stays open
    _, fds_closed = server.sample()
    return {"run": run, "model": model, "items": items, "stats": stats, "wall_s": wall, "samples": samples,
            "fds_closed": fds_closed}


def _memory(samples: list[tuple[float, float, int]], fds_closed: int) -> dict[str, Any]:
    # warm-up: the first tenth of the run (encoder, FAISS and allocator pools fill up)
    warm = samples[max(1, len(samples) // 10)] if len(samples) > 1 else samples[0]
    rss = [s[1] for s in samples]
    fds = [s[2] for s in samples]
    growth = rss[-1] - warm[1]
    fd_growth = fds_closed - fds[0]  # before any client connected vs after they all disconnected
    return {
        "rss_mb": {"start": round(rss[0], 1), "after_warmup": round(warm[1], 1), "end": round(rss[-1], 1),
                   "max": round(max(rss), 1), "growth_after_warmup": round(growth, 1)},
        "open_fds": {"start": fds[0], "under_load_end": fds[-1], "max": max(fds), "after_clients_closed": fds_closed,
                     "growth": fd_growth},
        "bounded": growth <= RSS_GROWTH_LIMIT_MB and fd_growth <= FD_GROWTH_LIMIT,
        "limits": {"rss_growth_mb": RSS_GROWTH_LIMIT_MB, "fd_growth": FD_GROWTH_LIMIT},
        "samples_every_s": 1.0, "samples": len(samples),
    }


def run_soak(clients: int = 16, seconds: float = 600.0, max_requests: int = 200_000, out: Path | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="recall-soak-") as tmp:
        server = Server(Path(tmp) / "data")
        try:
            server.wait_ready()
            done = asyncio.run(_load(server.url, clients, seconds, max_requests, server))
        finally:
            server.stop()
    run: Run = done["run"]
    statuses = {op: {str(k): v for k, v in sorted(c.items(), key=str)} for op, c in sorted(run.statuses.items())}
    server_errors = sum(v for c in run.statuses.values() for k, v in c.items() if isinstance(k, int) and k >= 500)
    latency = {op: {"n": len(ms), "p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1)}
               for op, ms in sorted(run.latency_ms.items()) if ms}
    result = {
        "config": {"clients": clients, "seconds": seconds, "max_requests": max_requests, "collection": COLLECTION,
                   "mix": OPS, "encoder": "audio-baseline", "clip_seconds": 0.5},
        "requests": run.sent, "wall_s": round(done["wall_s"], 1), "requests_per_s": round(run.sent / done["wall_s"], 1),
        "statuses": statuses, "server_errors": server_errors, "unexpected": run.unexpected,
        "final": compare(done["model"], done["items"], done["stats"], run),
        "resources": _memory(done["samples"], done["fds_closed"]),
        "latency": latency,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_avg_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()]},  # other jobs share the cores
    }
    result["ok"] = (server_errors == 0 and not run.unexpected and result["final"]["matches_model"]
                    and result["final"]["index_matches_catalog"])
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--max-requests", type=int, default=200_000)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "soak.json")
    args = parser.parse_args(argv)
    result = run_soak(args.clients, args.seconds, args.max_requests, args.out)
    summary = {k: result[k] for k in ("ok", "requests", "requests_per_s", "server_errors")}
    print(json.dumps({**summary, "final": result["final"], "resources": {k: result["resources"][k] for k in ("rss_mb", "open_fds", "bounded")}}, indent=2))
    return result


if __name__ == "__main__":
    main()
