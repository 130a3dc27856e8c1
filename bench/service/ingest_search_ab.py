"""Search while a 10-minute recording is ingested: the encoder batcher's scheduling variants, same run (issue 35).

Issue 35's target: search p99 <= 60 ms while a 10-minute recording is ingested, on the 2-core machine, with
10^5 windows and the default encoders. How the encoder's batcher schedules query batches beside ingest
batches (``app/worker/batcher.py``) is set by ``batching.*`` settings, so each variant is the working tree
served with other ``RECALL_BATCHING__*`` environment variables:

* ``one_lane_8`` (the default before this bench): queries go first on the batcher's one thread, and while
  they keep coming ingest batches hold 8 windows, so a query waits for at most one such batch;
* ``one_lane_4``: the same with ingest batches of 4 while queries come;
* ``query_lane``: query batches run on a second thread, beside the ingest batch in flight; ingest batches
  keep their 32 windows, on one torch thread while queries keep coming;
* ``query_lane_nice5`` / ``query_lane_nice10``: the same with the ingest thread at niceness +5 / +10, so
  that when a query and the ingest thread want one core, the query gets most of it.

Every variant gets its own server (``bench.service.query_path.Server``) on a copy of one corpus
(``bench.service.query_corpus``), all started first; then ``--rounds`` rounds, each variant in turn in
an order rotated every round (the machine is shared: its drift falls on every variant alike). One turn:
one client sends ``--alone`` 1-second WAV searches back to back (or at ``--rate`` per second), then a 10-minute FLAC recording is
ingested over the API while the same client keeps searching on one keep-alive connection. Per variant:
p50/p99 of the searches alone and of those that overlapped an ingest, and the ingest's real-time factor
(recording seconds / its wall time; the searches beside it take their share of the cores).

Answers: scheduling must not change them. Before the rounds every server answers the 64 query clips
on the corpus; after each ingest the recording's collection answers 8 clips; the JSON says whether
every variant's answers (ids, ranks, segments, distances to 1e-5) equal the first variant's, and
each ingest's indexed count.

    flock /tmp/recall-timing.lock python -m bench.service.ingest_search_ab [--rounds 3] [--windows 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.output import write_results
from bench.service import query_corpus as corpus
from bench.service.load import Req, RawConnection, percentiles, search_file_request
from bench.service.query_path import ROOT, Server, _query_files, _recording

RESULTS = ROOT / "bench" / "results"
_ONE_LANE = {"RECALL_BATCHING__QUERY_LANE": "false", "RECALL_BATCHING__INGEST_NICE": "0"}
_QUERY_LANE = {"RECALL_BATCHING__QUERY_LANE": "true", "RECALL_BATCHING__INGEST_BATCH_WHILE_QUERIED": "0"}
VARIANTS: dict[str, dict[str, str]] = {
    "one_lane_8": {**_ONE_LANE, "RECALL_BATCHING__INGEST_BATCH_WHILE_QUERIED": "8"},
    "one_lane_4": {**_ONE_LANE, "RECALL_BATCHING__INGEST_BATCH_WHILE_QUERIED": "4"},
    "query_lane": {**_QUERY_LANE, "RECALL_BATCHING__INGEST_NICE": "0"},
    "query_lane_nice5": {**_QUERY_LANE, "RECALL_BATCHING__INGEST_NICE": "5"},
    "query_lane_nice10": {**_QUERY_LANE, "RECALL_BATCHING__INGEST_NICE": "10"},
}
ANSWER_TOLERANCE = 1e-5
INGEST_CHECK_CLIPS = 8


def _load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen}


async def _search_until(conn: RawConnection, reqs: list[Req], start: int, done: asyncio.Future | None,
                        count: int, t0: float, rate: float = 0.0) -> tuple[list[float], list[float], list[str]]:
    """Searches on one connection, back to back or (``rate`` > 0) each starting 1/rate s after the last
    one started (at once when that one took longer): ``count`` of them, or (``done`` given) until it is
    done. Returns latencies (ms), start offsets from ``t0`` (s) and any non-200 statuses."""
    lat, starts, bad = [], [], []
    i = start
    next_at = time.perf_counter()
    while (done is None and i - start < count) or (done is not None and not done.done()):
        if rate > 0:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at = max(next_at + 1 / rate, time.perf_counter())
            if done is not None and done.done():
                break
        t = time.perf_counter()
        status, _ = await conn.request(reqs[i % len(reqs)])
        if status == 200:
            lat.append((time.perf_counter() - t) * 1000)
            starts.append(t - t0)
        else:
            bad.append(str(status))
        i += 1
    return lat, starts, bad


async def _answers(client: httpx.AsyncClient, reqs: list[Req]) -> list[list[dict[str, Any]]]:
    """Each request's top-k as (id, rank, distance, segments); the id is left out for an ingested
    recording's collection, whose one item's id is fresh in every variant."""
    out = []
    for req in reqs:
        r = await client.request(req.method, req.path, content=req.content, headers=req.headers)
        assert r.status_code == 200, r.text
        out.append([{"id": hit["id"], "rank": hit["rank"], "distance": hit["distance"], "segments": hit["segments"]}
                    for hit in r.json()["results"]])
    return out


def _same_answers(a: list[list[dict[str, Any]]], b: list[list[dict[str, Any]]], with_ids: bool) -> bool:
    def key(hit: dict[str, Any]) -> Any:
        segments = json.dumps(hit["segments"], sort_keys=True)
        return (hit["id"] if with_ids else None, hit["rank"], segments)

    return len(a) == len(b) and all(
        len(x) == len(y) and all(key(h) == key(g) and abs(h["distance"] - g["distance"]) <= ANSWER_TOLERANCE
                                 for h, g in zip(x, y)) for x, y in zip(a, b))


async def _turn(server: Server, reqs: list[Req], recording: bytes, encoder: str, alone: int,
                offset: int, rate: float) -> dict[str, Any]:
    """One variant's turn: searches alone, then an ingest with searches beside it; the recording's
    answers to the first clips before its collection is deleted."""
    name = f"rec{int(time.time() * 1000)}"
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        r = await client.post("/v1/collections", json={"name": name, "modality": "audio", "encoder": encoder})
        assert r.status_code in (200, 201), r.text
        conn = RawConnection("127.0.0.1", server.port)
        try:
            t0 = time.perf_counter()
            lat_alone, _, bad_alone = await _search_until(conn, reqs, offset, None, alone, t0, rate)
            cpu, started = server.cpu_seconds(), time.perf_counter()
            ingest = asyncio.ensure_future(client.post(f"/v1/collections/{name}/items",
                                                       files={"files": ("rec.flac", recording)}))
            lat_during, starts, bad_during = await _search_until(conn, reqs, offset, ingest, 0, started, rate)
            response = await ingest
            ingest_s = time.perf_counter() - started
            server_cpu = server.cpu_seconds() - cpu
        finally:
            await conn.close()
        assert response.status_code == 200, response.text
        info = (await client.get(f"/v1/collections/{name}")).json()
        answers = await _answers(client, [_retarget(q, name) for q in reqs[:INGEST_CHECK_CLIPS]])
        await client.delete(f"/v1/collections/{name}")
    return {"alone_ms": lat_alone, "during_ms": lat_during, "during_starts_s": starts, "ingest_s": ingest_s,
            "server_cpu_s_during": server_cpu, "non_200": bad_alone + bad_during, "indexed": response.json().get("indexed"),
            "collection": {k: info.get(k) for k in ("items", "windows", "item_count", "window_count") if k in info},
            "answers": answers}


def _retarget(req: Req, collection: str) -> Req:
    return Req(req.method, f"/v1/collections/{collection}/search", req.content, req.headers)


def _summary(turns: list[dict[str, Any]], recording_s: float) -> dict[str, Any]:
    during = [x for t in turns for x in t["during_ms"]]
    ingest_s = [t["ingest_s"] for t in turns]
    return {
        "search_alone": percentiles([x for t in turns for x in t["alone_ms"]]),
        "search_during_ingest": percentiles(during),
        "search_during_ingest_p99_per_turn_ms": [float(np.percentile(t["during_ms"], 99)) for t in turns if t["during_ms"]],
        "ingest_seconds": ingest_s,
        "ingest_realtime_factor": recording_s / float(np.median(ingest_s)),
        "ingest_realtime_factor_per_turn": [recording_s / s for s in ingest_s],
        "searches_per_ingest_second": len(during) / sum(ingest_s),
        "server_cpu_s_per_ingest": float(np.median([t["server_cpu_s_during"] for t in turns])),
        "indexed": [t["indexed"] for t in turns],
        "non_200": sum(len(t["non_200"]) for t in turns),
    }


def _finish(result: dict[str, Any], names: list[str], turns: dict[str, list[dict[str, Any]]],
            corpus_answers: dict[str, Any], args: argparse.Namespace, partial: bool) -> None:
    """Summaries and answer checks of the turns so far, written to ``args.out``."""
    done = [n for n in names if turns[n]]
    first = done[0]
    result["partial"] = partial
    result["runs"] = {n: _summary(turns[n], args.minutes * 60) for n in done}
    result["answers"] = {
        "corpus_same_as_" + names[0]: {n: _same_answers(corpus_answers[names[0]], corpus_answers[n], True) for n in names},
        "ingested_recording_same_as_" + first: {
            n: all(_same_answers(turns[first][0]["answers"], t["answers"], False) for t in turns[n]) for n in done},
        "tolerance_distance": ANSWER_TOLERANCE,
        "ingested_collection": {n: turns[n][0]["collection"] for n in done},
    }
    result["machine"]["load_after"] = _load()
    if partial:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    else:
        write_results(result, args.out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {sorted(VARIANTS)}")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--alone", type=int, default=200, help="searches alone before each ingest")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="searches per second (each starts 1/rate s after the last started); 0: back to back. "
                        "A fixed rate gives every variant the same search work, so their ingest speeds compare")
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the ingested recording")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--out", type=Path, default=RESULTS / "ingest_search_ab.json")
    args = parser.parse_args(argv)
    names = [v for v in args.variants.split(",") if v]
    unknown = set(names) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; known: {sorted(VARIANTS)}")

    from app.settings import Settings

    encoders = Settings().encoders
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": _load(),
                    "note": "2 cores shared with other jobs (see load_*): compare variants only within this file"},
        "head": subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip(),
        "command": "python -m bench.service.ingest_search_ab " + " ".join(argv if argv is not None else sys.argv[1:]),
        "encoders": {"audio": encoders.default_audio},
        "scenario": f"one client, 1-s WAV searches {f'at {args.rate:g}/s' if args.rate else 'back to back'} "
                    f"(k=10, {args.windows} windows): {args.alone} alone, then "
                    f"beside the ingest of a {args.minutes:g}-minute FLAC recording over the API; {args.rounds} rounds, "
                    "variants in an order rotated each round",
        "variants": {n: VARIANTS[n] for n in names},
        "rounds": [],
    }
    files = _query_files()["wav16k"]
    reqs = [search_file_request(corpus.AUDIO_COLLECTION, n, data, 10, ctype) for n, data, ctype in files]
    recording = _recording(args.minutes)
    turns: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="recall-isab-") as tmp:
        servers: dict[str, Server] = {}
        try:
            for name in names:
                data = Path(tmp) / name
                result["corpus"] = corpus.prepared(args.cache, encoders.default_audio, encoders.default_image,
                                                   args.windows, 0, data)
                servers[name] = Server(ROOT, data, name)
                servers[name].env.update(VARIANTS[name])
            started = time.perf_counter()
            with ThreadPoolExecutor(len(servers)) as pool:  # their loading overlaps: minutes less of the run
                list(pool.map(Server.start, servers.values()))
            result["servers_ready_s"] = time.perf_counter() - started
            print(json.dumps({"servers_ready_s": result["servers_ready_s"]}), flush=True)
            corpus_answers = {}
            for name, server in servers.items():
                async def warm_and_answer(server: Server = server) -> Any:
                    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
                        return await _answers(client, reqs)  # also the warm-up: first-touch costs are no user's
                corpus_answers[name] = asyncio.run(warm_and_answer())
            for r in range(args.rounds):
                order = names[r % len(names):] + names[:r % len(names)]
                result["rounds"].append({"order": order, "load_before": _load()})
                for name in order:
                    turn = asyncio.run(_turn(servers[name], reqs, recording, encoders.default_audio, args.alone,
                                             offset=r * 7, rate=args.rate))
                    turns[name].append(turn)
                    _finish(result, names, turns, corpus_answers, args, partial=True)  # a run cut short keeps its turns
                    print(json.dumps({"round": r, "variant": name, "during_p99_ms": float(np.percentile(turn["during_ms"], 99)),
                                      "during_n": len(turn["during_ms"]), "ingest_s": turn["ingest_s"],
                                      "load_1m": os.getloadavg()[0]}), flush=True)
        finally:
            for server in servers.values():
                server.stop()
    _finish(result, names, turns, corpus_answers, args, partial=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
