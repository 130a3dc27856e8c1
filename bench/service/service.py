"""End-to-end service benchmark: a 10-minute recording ingested over HTTP, and query latency.

Writes bench/results/service.json. Ingest speed is seconds of audio indexed per second of wall
time (decode, windows, features, encode, SQLite commit, index add), for every audio encoder
given, measured in the same run so the ratios between them are meaningful.

    python -m bench.service.service [--minutes 10] [--encoders audio-baseline,...]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _recording(minutes: float, rate: int = 16000) -> bytes:
    """Speech-like noise: bursts of band-limited noise and tones with pauses (deterministic)."""
    rng = np.random.default_rng(0)
    n = int(minutes * 60 * rate)
    wave = 0.01 * rng.standard_normal(n)
    t = 0
    while t < n:
        length = int(rng.uniform(0.2, 0.8) * rate)
        freq = rng.uniform(150, 3000)
        seg = np.sin(2 * np.pi * freq * np.arange(min(length, n - t)) / rate) * 0.2
        wave[t : t + len(seg)] += seg
        t += length + int(rng.uniform(0.1, 0.5) * rate)
    buf = io.BytesIO()
    sf.write(buf, wave.astype(np.float32), rate, format="FLAC")
    return buf.getvalue()


def bench_ingest(encoder: str, data: bytes, minutes: float, queries: int) -> dict:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), encoders={"default_audio": encoder, "default_image": "image-baseline"},
                            limits={"max_upload_bytes": 1 << 30})
        with TestClient(create_app(settings)) as client:
            client.post("/v1/collections", json={"name": "b", "modality": "audio", "encoder": encoder})
            started = time.perf_counter()
            cpu = time.process_time()
            response = client.post("/v1/collections/b/items", files=[("files", ("rec.flac", data))])
            wall = time.perf_counter() - started
            cpu = time.process_time() - cpu
            assert response.status_code == 200, response.text
            segments = response.json()["indexed"][0]["segments"]
            clip = io.BytesIO()
            full, rate = sf.read(io.BytesIO(data), dtype="float32")
            latencies = []
            for i in range(queries):
                start = (i * 7919) % (len(full) - rate)
                clip = io.BytesIO()
                sf.write(clip, full[start : start + rate], rate, format="WAV")
                t = time.perf_counter()
                r = client.post("/v1/collections/b/search", files={"file": ("q.wav", clip.getvalue())}, data={"k": "10"})
                latencies.append((time.perf_counter() - t) * 1000)
                assert r.status_code == 200
    seconds = minutes * 60
    return {
        "encoder": encoder, "audio_seconds": seconds, "segments": segments, "wall_seconds": wall,
        "process_cpu_seconds": cpu, "realtime_factor": seconds / wall,
        "query_ms_p50": float(np.percentile(latencies, 50)), "query_ms_p99": float(np.percentile(latencies, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--encoders", default=None, help="comma-separated; default: every audio encoder available")
    parser.add_argument("--out", default="bench/results/service.json")
    args = parser.parse_args()
    from app.encoders.registry import discover

    names = args.encoders.split(",") if args.encoders else sorted(n for n, s in discover().items() if s.modality == "audio")
    data = _recording(args.minutes)
    results = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform()}, "ingest": []}
    for name in names:
        row = bench_ingest(name, data, args.minutes, args.queries)
        print(json.dumps(row))
        results["ingest"].append(row)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
