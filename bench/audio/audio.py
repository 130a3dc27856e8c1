"""Audio encoder speed: throughput, a 10-minute recording end to end, Hamming vs float search.

    python -m bench.audio.audio [--out bench/results/audio.json] [--data ../shared/data]

* throughput: seconds of audio encoded per CPU-second (and per wall second) at batch 1 and 32,
  one window per input, torch on ``--threads`` threads (2: the service's setting);
* ingest: a 10-minute recording cut into the encoder's default windows and hops, encoded in
  batches of 32 (the service's batch size); real-time factor = 600 s / wall seconds;
* search: the model's own codes and float embeddings of real windows (asc clips when the data
  folder is there, else noise), tiled to 10^6 rows; one query, IndexBinaryFlat vs IndexFlatIP,
  faiss on one thread (with nq = 1 a second thread only spins, see DESIGN.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch

from app.encoders.base import Encoder
from app.encoders.registry import create_encoder, discover
from app.features.windows import cut_windows


def _timed(fn: Any, repeat: int) -> tuple[float, float]:
    """Best-of wall and CPU seconds of ``fn()`` (best-of: the machine is shared with other jobs)."""
    walls, cpus = [], []
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - w0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus)


def throughput(encoder: Encoder, batch: int, repeat: int = 5) -> dict[str, float]:
    rng = np.random.default_rng(0)
    window = int(round(encoder.default_window_s * encoder.sample_rate))
    waves = [(0.1 * rng.standard_normal(window)).astype(np.float32) for _ in range(batch)]
    n_batches = max(1, 32 // batch)
    encoder.encode(waves)  # warm-up: first calls allocate
    wall, cpu = _timed(lambda: [encoder.encode(waves) for _ in range(n_batches)], repeat)
    audio = batch * n_batches * encoder.default_window_s
    return {"batch": batch, "audio_s_per_cpu_s": audio / cpu, "audio_s_per_wall_s": audio / wall}


def ingest(encoder: Encoder, minutes: float = 10.0) -> dict[str, float]:
    rng = np.random.default_rng(1)
    wave = (0.1 * rng.standard_normal(int(minutes * 60 * encoder.sample_rate))).astype(np.float32)

    def run() -> int:
        windows, _ = cut_windows(wave, encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s)
        for start in range(0, len(windows), 32):
            encoder.encode(windows[start : start + 32])
        return len(windows)

    n_windows = run()
    wall, cpu = _timed(run, 3)
    return {"minutes": minutes, "windows": n_windows, "window_s": encoder.default_window_s, "hop_s": encoder.default_hop_s,
            "wall_s": wall, "cpu_s": cpu, "real_time_factor": minutes * 60 / wall}


def _real_windows(encoder: Encoder, data: Path, n: int) -> list[np.ndarray]:
    manifest = data / "asc" / "asc.csv"
    if manifest.is_file():
        from app.training.audio.data import load_waves, read_manifest

        records = read_manifest(manifest)[:: max(1, 7200 // n)][:n]
        return load_waves(records, encoder.sample_rate)
    rng = np.random.default_rng(2)
    window = int(round(encoder.default_window_s * encoder.sample_rate))
    return [(0.1 * rng.standard_normal(window)).astype(np.float32) for _ in range(n)]


def search(encoder: Encoder, data: Path, size: int = 1_000_000, repeat: int = 20) -> dict[str, Any]:
    emb = encoder.encode(_real_windows(encoder, data, 2000))
    reps = -(-size // len(emb))
    codes = np.ascontiguousarray(np.tile(emb.codes, (reps, 1))[:size])
    floats = np.ascontiguousarray(np.tile(emb.floats, (reps, 1))[:size])
    faiss.omp_set_num_threads(1)
    binary = faiss.IndexBinaryFlat(encoder.bits)
    binary.add(codes)
    flat = faiss.IndexFlatIP(encoder.dim)
    flat.add(floats)
    query_codes, query_floats = emb.codes[5:6], emb.floats[5:6]
    binary.search(query_codes, 10)
    flat.search(query_floats, 10)
    binary_wall, _ = _timed(lambda: binary.search(query_codes, 10), repeat)
    float_wall, _ = _timed(lambda: flat.search(query_floats, 10), max(3, repeat // 4))
    return {"rows": size, "bits": encoder.bits, "dim": encoder.dim, "distinct_rows": len(emb),
            "hamming_ms": binary_wall * 1e3, "float_ms": float_wall * 1e3, "speedup": float_wall / binary_wall,
            "binary_mb": codes.nbytes / 1e6, "float_mb": floats.nbytes / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench/results/audio.json")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--encoders", default="speech-attn-hash,sounds-texture,sounds-attn-hash,audio-baseline")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--search-rows", type=int, default=1_000_000)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    specs = discover()
    results: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "torch_threads": args.threads, "platform": platform.platform(),
                    "torch": torch.__version__, "faiss": faiss.__version__,
                    # the bench shares its 2 cores with other jobs; best-of timings, and the load they ran under
                    "load_average_1_5_15": list(os.getloadavg())},
        "encoders": {},
    }
    for name in [n for n in args.encoders.split(",") if n in specs]:
        encoder = create_encoder(name, specs)
        entry: dict[str, Any] = {"throughput": [throughput(encoder, 1), throughput(encoder, 32)], "ingest_10min": ingest(encoder)}
        if name != "audio-baseline":
            entry["search_1e6"] = search(encoder, Path(args.data), args.search_rows)
        results["encoders"][name] = entry
        print(name, json.dumps(entry), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
