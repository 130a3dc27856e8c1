"""In-process cost of one 1 s window through the default audio encoder, per checkpoint version.

    python -m bench.audio.window_cost [--encoders general-audio@2,general-audio] [--repeats 5]

Writes bench/results/audio_window_cost.json: milliseconds per window on one torch thread, for a
single window (a query; all on the calling thread, and as served, with general-audio's two halves on
two threads) and for batches of 32 (ingest), best of ``--repeats`` runs (the machine is
shared, so the best run is the least disturbed one; the encoders take turns). Windows are speech-like (a harmonic tone with
a syllable-rate envelope, so the router sends them to the speech half and the speech views run) and
noise (sounds half); general-audio version 3's speech views run on every window either way.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np


def windows(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(16000) / 16000
    out = []
    for i in range(n):
        if i % 2 == 0:
            f0 = rng.uniform(100, 220)
            wave = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 8)) * (0.5 + 0.5 * np.sin(2 * np.pi * 4 * t))
            out.append((0.1 * wave + 0.003 * rng.standard_normal(16000)).astype(np.float32))
        else:
            out.append((0.1 * rng.standard_normal(16000)).astype(np.float32))
    return out


def interleaved_best_ms(encoders: dict, batch: list[np.ndarray], repeats: int) -> dict[str, float]:
    """Best milliseconds per window of each encoder, the encoders taking turns within every repeat, so
    that a burst of load from other jobs falls on all of them rather than on whichever ran then."""
    best = {name: float("inf") for name in encoders}
    for encoder in encoders.values():
        encoder.encode(batch)  # warm-up
    for _ in range(repeats):
        for name, encoder in encoders.items():
            started = time.perf_counter()
            encoder.encode(batch)
            best[name] = min(best[name], time.perf_counter() - started)
    return {name: round(1000 * value / len(batch), 3) for name, value in best.items()}


def query_median_ms(encoders: dict, query_windows: list[np.ndarray], rounds: int) -> dict[str, float]:
    """Median milliseconds of one query window as served (issue 37's target is a median, not a best run), the
    encoders taking turns, each round one window of each kind (speech-like, noise)."""
    times: dict[str, list[float]] = {name: [] for name in encoders}
    for encoder in encoders.values():
        encoder.encode(query_windows[:1])  # warm-up
    for _ in range(rounds):
        for window in query_windows:
            for name, encoder in encoders.items():
                started = time.perf_counter()
                encoder.encode([window])
                times[name].append(time.perf_counter() - started)
    return {name: round(1000 * float(np.median(t)), 3) for name, t in times.items()}


def main(argv: list[str] | None = None) -> int:
    import torch

    from app.encoders.registry import create_encoder, discover

    parser = argparse.ArgumentParser(prog="python -m bench.audio.window_cost")
    parser.add_argument("--encoders", default="general-audio@2,general-audio")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/audio_window_cost.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    specs = discover()
    from app.encoders.audio import routed_fusion

    encoders = {name: create_encoder(name, specs) for name in args.encoders.split(",")}
    served = routed_fusion.SIDE_THREAD_MAX_WINDOWS
    single = {}
    # "one thread": everything on the calling thread; "as served": a query's window runs the speech and
    # sound halves on two threads (app/encoders/side_thread.py), as the service does
    for mode, side in (("one_thread", 0), ("as_served", served)):
        routed_fusion.SIDE_THREAD_MAX_WINDOWS = side
        runs = [interleaved_best_ms(encoders, [w], args.repeats) for w in windows(2)]  # speech-like, noise
        single[mode] = {name: min(r[name] for r in runs) for name in encoders}
    routed_fusion.SIDE_THREAD_MAX_WINDOWS = served
    median = query_median_ms(encoders, windows(2), 50)
    batch = interleaved_best_ms(encoders, windows(32), args.repeats)
    results = {name: {"version": e.version, "dim": e.dim, "bits": e.bits,
                      "ms_per_window_batch_1_one_thread": single["one_thread"][name],
                      "ms_per_window_batch_1_as_served": single["as_served"][name],
                      "ms_query_window_as_served_median": median[name],
                      "ms_per_window_batch_32": batch[name]}
               for name, e in encoders.items()}
    for name, row in results.items():
        print(name, row, flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch_threads": 1, "cpus": os.cpu_count(),
              "load_average_1_5_15": list(os.getloadavg()), "repeats": args.repeats, "results": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
