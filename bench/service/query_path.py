"""Query path over HTTP: latency and throughput of the real server on loopback.

Starts ``recall serve`` (uvicorn, one worker) on 127.0.0.1 against a copy of a cached corpus
(``bench.service.query_corpus``: 10^5 audio windows encoded by the service's *default* audio encoder,
10^5 images by the default image encoder) and drives it with ``bench.service.load``:

* ``audio_wav16k``: 1-second 16 kHz mono PCM WAV queries by example at 1, 4, 16 and 64
  concurrent clients (q/s and the ratio to one client);
* ``formats``: the same second as MP3, FLAC, Ogg Vorbis and 48 kHz stereo WAV, one client;
* ``text``: text-to-image at 10^5 images, re-rank R = 100, and stage 1 only, one client;
* ``ingest_under_search``: one client searching while a 10-minute recording is ingested.

Requests come from ``bench.service.load``'s raw keep-alive client (~0.4 ms of CPU per request; httpx,
~2.4 ms, is measured too at 1 and 16 clients). Every phase records the server's CPU time per
query and how busy the whole machine was, since the 2 cores are shared with other jobs.

``--baseline REV`` exports that git revision's ``app/`` to a temporary directory and runs every
phase against it too, one server after the other on copies of the same corpus, so before/after
ratios come from one run (that revision must read the corpus's catalog schema: point ``--cache``
at a fresh directory to build one with today's code if an old revision refuses it).
``--profile`` attaches py-spy (not a dependency: ``pip install py-spy``) to each server during a one-client
WAV phase and a one-client text phase (re-ranked, new sentences) and writes, per phase, a flame graph
(``bench/results/query_path_profile_{wav,text}.svg``), the collapsed stacks (``.txt``) and a per-category
breakdown (``bench.service.profile_breakdown``, in the JSON as ``profile_wav`` / ``profile_text``).

    python -m bench.service.query_path [--baseline HEAD~3] [--profile] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.service import query_corpus as corpus
from bench.service.load import Req, json_request, percentiles, run_load, search_file_request
from bench.service.profile_breakdown import breakdown

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
N_QUERY_FILES = 64  # distinct query clips, so nothing in the path can cache one answer
PROFILE_RATE_HZ = 250
# The load generator's HTTP client: "raw" (bench.service.load.RawConnection, ~0.4 ms of CPU per request)
# leaves the server most of the two cores; httpx (~2.4 ms per request) is measured too, at 1 and 16
# clients, since it is what a Python user of the API would run.
CLIENT = "raw"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``recall serve`` from a source tree, in its own process, on loopback."""

    def __init__(self, tree: Path, data_dir: Path, label: str, plain_stack: bool = False) -> None:
        self.tree, self.data_dir, self.label = tree, data_dir, label
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        path = [str(tree)]
        if plain_stack:  # uvicorn falls back to asyncio's loop and h11 when these cannot be imported
            hide = data_dir / "hide-fast-stack"
            for module in ("uvloop", "httptools"):
                (hide / module).mkdir(parents=True, exist_ok=True)
                (hide / module / "__init__.py").write_text("raise ImportError('hidden by bench.service.query_path')\n")
            path.insert(0, str(hide))
        self.stack = "asyncio + h11" if plain_stack else _installed_stack()
        self.env = {**os.environ, "RECALL_DEMO": "0", "RECALL_HOST": "127.0.0.1", "RECALL_LOG_LEVEL": "warning",
                    "RECALL_LIMITS__MAX_UPLOAD_BYTES": str(1 << 30), "HF_HUB_OFFLINE": "1",
                    "PYTHONPATH": os.pathsep.join(path)}
        self.proc: subprocess.Popen | None = None

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--data-dir", str(self.data_dir), "--port", str(self.port)],
            cwd=self.tree, env=self.env, stdout=subprocess.DEVNULL, stderr=open(self.data_dir / "server.log", "wb"),
        )
        deadline = time.time() + 600
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.label} server exited: {(self.data_dir / 'server.log').read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(f"{self.label} server not ready after 600 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _installed_stack() -> str:
    """What uvicorn picks here: uvloop and httptools when importable (uvicorn's "auto"), else asyncio and h11."""
    import importlib.util

    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"{loop} + {http}"


def _export_tree(rev: str, dest: Path) -> str:
    """The app/ package at ``rev`` (git archive: reads the repository, changes nothing)."""
    sha = subprocess.check_output(["git", "rev-parse", rev], cwd=ROOT, text=True).strip()
    archive = subprocess.check_output(["git", "archive", sha, "app"], cwd=ROOT)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return sha


def _query_files(rate_hz: int = corpus.CLIP_RATE) -> dict[str, list[tuple[str, bytes, str]]]:
    """The same 1-second clips in each format (held-out seeds: not in the corpus)."""
    rng = np.random.default_rng(12345)
    clips = [corpus.synthetic_clip(rng) for _ in range(N_QUERY_FILES)]
    import soxr

    out: dict[str, list[tuple[str, bytes, str]]] = {k: [] for k in ("wav16k", "mp3", "flac", "ogg", "wav48k_stereo")}
    for i, clip in enumerate(clips):
        out["wav16k"].append((f"q{i}.wav", corpus.wav_bytes(clip), "audio/wav"))
        out["flac"].append((f"q{i}.flac", corpus.wav_bytes(clip, fmt="FLAC"), "audio/flac"))
        out["ogg"].append((f"q{i}.ogg", corpus.wav_bytes(clip, fmt="OGG", subtype="VORBIS"), "audio/ogg"))
        out["mp3"].append((f"q{i}.mp3", corpus.wav_bytes(clip, fmt="MP3", subtype="MPEG_LAYER_III"), "audio/mpeg"))
        wide = soxr.resample(clip, rate_hz, 48000).astype(np.float32)
        out["wav48k_stereo"].append((f"q{i}.wav", corpus.wav_bytes(wide, rate=48000, channels=2), "audio/wav"))
    return out


def _texts(n: int) -> list[str]:
    from app.training.synthesis.images import generate_scenes

    return list(dict.fromkeys(c for s in generate_scenes(n, seed=4242) for c in s.captions))[:n]


def _recording(minutes: float) -> bytes:
    rng = np.random.default_rng(99)
    wave = np.concatenate([corpus.synthetic_clip(rng, 10.0) for _ in range(int(minutes * 6))])
    return corpus.wav_bytes(wave, fmt="FLAC")


def _machine_ticks() -> tuple[int, int]:
    """(all, idle) jiffies of the whole machine since boot."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values), values[3] + values[4]


async def measured(server: Server, requests: list[Req], concurrency: int, total: int, max_seconds: float, **kw: Any) -> dict[str, Any]:
    """``run_load`` plus the server's CPU time per query and how busy the whole machine was
    (other jobs included): on a shared 2-core machine both are needed to read a q/s figure."""
    cpu, ticks = server.cpu_seconds(), _machine_ticks()
    kw.setdefault("kind", CLIENT)
    row = await run_load(server.url, requests, concurrency, total, max_seconds, **kw)
    all_ticks, idle = (a - b for a, b in zip(_machine_ticks(), ticks))
    row["server_cpu_ms_per_query"] = (server.cpu_seconds() - cpu) * 1000 / max(1, row["n"])
    row["machine_busy_fraction"] = 1 - idle / max(1, all_ticks)
    return row


async def _ingest_under_search(server: Server, search: list[Req], recording: bytes, seconds: float, encoder: str,
                               repeats: int = 1) -> dict[str, Any]:
    """One client searching back to back, alone and while the recording is ingested over the API, ``repeats``
    times in turn (alone, during, alone, during...) so that both see the same drift of a shared machine."""
    alone: list[dict[str, Any]] = []
    during: list[dict[str, Any]] = []
    ingest_s: list[float] = []
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        for _ in range(repeats):
            name = f"rec{int(time.time() * 1000)}"
            r = await client.post("/v1/collections", json={"name": name, "modality": "audio", "encoder": encoder})
            assert r.status_code in (200, 201), r.text
            alone.append(await run_load(server.url, search, 1, 200, 20, keep_latencies=True, kind=CLIENT))
            started = time.perf_counter()
            ingest = asyncio.create_task(client.post(f"/v1/collections/{name}/items", files={"files": ("rec.flac", recording)}))
            while not ingest.done():
                during.append(await run_load(server.url, search, 1, 5, 10, keep_latencies=True, kind=CLIENT))
            response = await ingest
            ingest_s.append(time.perf_counter() - started)
            assert response.status_code == 200, response.text
            await client.delete(f"/v1/collections/{name}")
    # percentiles over every search that overlapped an ingest, and over every search of the quiet spells
    return {"recording_seconds": seconds, "ingests": repeats, "ingest_seconds": ingest_s,
            "realtime_factor": seconds / float(np.median(ingest_s)),
            "search_alone": _merge_runs(alone), "search_during_ingest": _merge_runs(during)}


def _merge_runs(runs: list[dict[str, Any]]) -> dict[str, Any]:
    lat = [x for r in runs for x in r.get("latencies_ms", [])]
    return {**percentiles(lat), "runs": len(runs)} if lat else {"n": 0}


def _phase_requests(collection_audio: str, files: dict[str, list[tuple[str, bytes, str]]]) -> dict[str, list[Req]]:
    return {fmt: [search_file_request(collection_audio, name, data, 10, ctype) for name, data, ctype in rows]
            for fmt, rows in files.items()}


async def _run_phases(server: Server, reqs: dict[str, list[Req]], texts: list[Req], texts_stage1: list[Req],
                      quick: bool, skip: set[str], profile: Path | None) -> dict[str, Any]:
    n1 = 100 if quick else 300
    out: dict[str, Any] = {"server_stack": server.stack}
    await run_load(server.url, reqs["wav16k"], 1, 30, 30, kind=CLIENT)  # warm-up: first-touch costs are not a user's
    if profile is not None:  # one client, py-spy attached: where each millisecond goes
        phases = [("wav", reqs["wav16k"], 400)]  # clips may repeat: nothing caches an audio query
        if texts:  # sentences the text phase below does not send (its cache stays cold), each once
            phases.append(("text", texts[len(texts) // 2:], len(texts) - len(texts) // 2 - 5))
            await run_load(server.url, texts[-5:], 1, 5, 30, kind=CLIENT)  # loads nothing new; first-touch costs
            texts = texts[:len(texts) // 2]
            texts_stage1 = texts_stage1[:len(texts_stage1) // 2]
        for phase, requests, total in phases:
            stem = profile.with_name(f"{profile.name}_{phase}")
            spy = _start_profile(server, stem)
            await asyncio.sleep(1.0)  # let py-spy attach
            run = await measured(server, requests, 1, total, 60)
            _stop_profile(spy)
            out[f"profile_{phase}"] = {"run": run, "breakdown": breakdown(stem.with_suffix(".txt"), run["n"], PROFILE_RATE_HZ)}
    if "audio" not in skip:
        rows = []
        for c in (1, 4, 16, 64):
            rows.append(await measured(server, reqs["wav16k"], c, max(n1, 25 * c), 20 if quick else 40))
        base = rows[0]["queries_per_s"]
        for row in rows:
            row["ratio_to_one_client"] = row["queries_per_s"] / base
        out["audio_wav16k"] = rows
        out["audio_wav16k_httpx_client"] = [await measured(server, reqs["wav16k"], c, max(n1, 25 * c), 20 if quick else 40, kind="httpx")
                                            for c in (1, 16)]
    if "formats" not in skip:
        out["formats"] = {fmt: await measured(server, reqs[fmt], 1, n1 // 3, 20) for fmt in ("mp3", "flac", "ogg", "wav48k_stereo")}
    if "text" not in skip and texts:
        # every request a sentence not seen before: the text encoder caches recent sentences
        half = len(texts) // 2
        out["text"] = {"rerank_R100": await measured(server, texts[:half], 1, half, 60),
                       "stage1_only": await measured(server, texts_stage1[half:], 1, half, 60)}
    return out


def _load() -> dict[str, float]:
    one, five, fifteen = os.getloadavg()
    return {"load_1m": one, "load_5m": five, "load_15m": fifteen}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=100_000)
    parser.add_argument("--images", type=int, default=100_000)
    parser.add_argument("--baseline", help="git revision to compare against in the same run (served with asyncio + h11)")
    parser.add_argument("--baseline-stack", choices=("plain", "fast"), default="plain",
                        help="serve the baseline with asyncio + h11 (plain: a revision from before uvloop/httptools) "
                             "or with the same stack as the working tree (fast: isolates code changes)")
    parser.add_argument("--stack-ab", action="store_true", help="also run the working tree with asyncio + h11")
    parser.add_argument("--profile", action="store_true", help="py-spy flame graphs of a one-client WAV phase")
    parser.add_argument("--quick", action="store_true", help="fewer requests per phase")
    parser.add_argument("--ingests", type=int, default=1, help="ingest phase: recordings ingested, one after another")
    parser.add_argument("--skip", default="", help="comma-separated phases to skip: audio,formats,text,ingest")
    parser.add_argument("--audio-encoder", help="registry key of the corpus's audio encoder, e.g. general-audio@2 "
                        "(default: the service's default); the collection records its version, so a --baseline tree "
                        "that knows that version answers with the same checkpoint")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--out", type=Path, default=RESULTS / "query_path.json")
    args = parser.parse_args(argv)
    if args.profile and not (shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").is_file()):
        parser.error("--profile attaches py-spy, which is not installed: pip install py-spy (it is no dependency)")
    skip = set(filter(None, args.skip.split(",")))

    from app.settings import Settings

    encoders = Settings().encoders  # the service's defaults (RECALL_ENCODERS__* honoured), never hard-coded
    audio_encoder = args.audio_encoder or encoders.default_audio
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_before": _load(),
                    "note": "2 cores shared with other jobs: see load_* and machine_busy_fraction; compare "
                            "variants only within this file (one run, same corpus, servers one after another)"},
        "encoders": {"audio": audio_encoder, "image": encoders.default_image},
        "query": "1-second clips of synthetic speech-like audio (not in the corpus), k=10, mode two_stage; "
                 "text queries: distinct generated captions, k=10",
        "runs": {},
    }
    files = _query_files()
    texts = _texts(400 if not args.quick else 120)
    with tempfile.TemporaryDirectory(prefix="recall-qp-") as tmp:
        tmp_path = Path(tmp)
        variants: list[tuple[str, Path, bool]] = []
        if args.baseline:
            (tmp_path / "before").mkdir()
            result["baseline"] = _export_tree(args.baseline, tmp_path / "before")
            variants.append(("before", tmp_path / "before", args.baseline_stack == "plain"))
        if args.stack_ab:
            variants.append(("after_asyncio_h11", ROOT, True))
        variants.append(("after", ROOT, False))
        result["head"] = subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
        servers = {}
        for label, tree, plain in variants:
            data = tmp_path / f"data-{label}"
            result["corpus"] = corpus.prepared(args.cache, audio_encoder, encoders.default_image,
                                               args.windows, 0 if "text" in skip else args.images, data)
            servers[label] = Server(tree, data, label, plain_stack=plain)
        reqs = _phase_requests(corpus.AUDIO_COLLECTION, files)
        path = f"/v1/collections/{corpus.IMAGE_COLLECTION}/search"
        text_reqs = [json_request(path, {"text": t, "k": 10, "rerank": True, "rerank_top": 100}) for t in texts]
        stage1 = [json_request(path, {"text": t, "k": 10, "rerank": False}) for t in texts]
        recording = _recording(10.0)
        # one server at a time (two would share the cores)
        for label, server in servers.items():
            server.start()
            try:
                # query_path_profile_{wav,text}.{svg,txt} (and _before_ ones with --baseline): each run replaces them
                name = "query_path_profile" if label == "after" else "query_path_profile_before"
                profile = RESULTS / name if args.profile and label in ("before", "after") else None
                row = asyncio.run(_run_phases(server, reqs, text_reqs, stage1, args.quick, skip, profile))
                if "ingest" not in skip:
                    row["ingest_under_search"] = asyncio.run(
                        _ingest_under_search(server, reqs["wav16k"], recording, 600.0, audio_encoder, args.ingests))
                row["load_after"] = _load()
                result["runs"][label] = row
                print(json.dumps({label: {k: v for k, v in row.items() if not k.startswith("profile_")}}, indent=1), flush=True)
            finally:
                server.stop()
    if "before" in result["runs"]:
        result["ratios_before_over_after"] = _ratios(result["runs"]["before"], result["runs"]["after"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _ratios(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b, a in zip(before.get("audio_wav16k", []), after.get("audio_wav16k", [])):
        out[f"wav16k_c{a['concurrency']}"] = {"p50": b["p50_ms"] / a["p50_ms"], "p99": b["p99_ms"] / a["p99_ms"],
                                              "qps_after_over_before": a["queries_per_s"] / b["queries_per_s"],
                                              "server_cpu_per_query": b["server_cpu_ms_per_query"] / a["server_cpu_ms_per_query"]}
    for fmt in after.get("formats", {}):
        b, a = before["formats"][fmt], after["formats"][fmt]
        out[fmt] = {"p50": b["p50_ms"] / a["p50_ms"]}
    for kind in after.get("text", {}):
        b, a = before["text"][kind], after["text"][kind]
        out[f"text_{kind}"] = {"p50": b["p50_ms"] / a["p50_ms"]}
    return out


def _start_profile(server: Server, stem: Path) -> list[subprocess.Popen]:
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    assert server.proc is not None
    common = [spy, "record", "--pid", str(server.proc.pid), "--rate", str(PROFILE_RATE_HZ), "--threads", "--nonblocking"]
    stem.parent.mkdir(parents=True, exist_ok=True)
    return [
        subprocess.Popen([*common, "--format", "flamegraph", "--output", f"{stem}.svg"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
        subprocess.Popen([*common, "--format", "raw", "--output", f"{stem}.txt"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
    ]


def _stop_profile(procs: list[subprocess.Popen]) -> None:
    import signal

    for p in procs:
        p.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    for p in procs:
        p.wait(60)


if __name__ == "__main__":
    raise SystemExit(main())
