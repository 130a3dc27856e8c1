"""Issue 35's same-run A/B for the int8 speech front-end: speed, and what it does to the answers.

    python -m bench.audio.frontend_int8 [--data ../shared/data] [--encoder general-audio]

Writes bench/results/audio_frontend_int8.json. Speed: milliseconds per window of the encoder with the
float32 and the int8 convolution stack (app/features/pretrained/quantise.py), taking turns in one process
on one torch thread: a query window (median, as served) and ingest batches of 32 (best of the repeats),
with the same synthetic windows as bench/audio/window_cost.py. Quality: the generalisation bench's sets
(real speech and sounds disjoint from training), MAP float and Hamming on each precision, and the mean
top-10 overlap of every query's ranked list with the float32 one (float and Hamming ranking). The rule
(issue 35): MAP may drop by at most 0.005 and top-10 overlap must be at least 0.90 for a change to become
the default; otherwise it ships opt-in.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.audio.window_cost import interleaved_best_ms, query_median_ms, windows

MAX_MAP_DROP, MIN_OVERLAP = 0.005, 0.90  # issue 35's rule


class AtPrecision:
    """An encoder whose speech front-end runs at ``precision`` for each call (the setting is process-wide)."""

    def __init__(self, encoder: Any, precision: str) -> None:
        self.encoder, self.precision = encoder, precision

    def __getattr__(self, name: str) -> Any:  # sample rate, window and hop: the encoder's own
        return getattr(self.encoder, name)

    def encode(self, batch: list[np.ndarray]) -> Any:
        from app.features.pretrained import ort_convs

        ort_convs.set_precision(self.precision)
        try:
            return self.encoder.encode(batch)
        finally:
            ort_convs.set_precision("float32")


def item_scores(floats: np.ndarray, signs: np.ndarray, owner: np.ndarray, keep: np.ndarray, n: int,
                kind: str) -> np.ndarray:
    """(items, items) scores as the service ranks clips (mean over the kept windows), self excluded."""
    from app.training.retrieval import mean_window_scores

    if kind == "float":
        unit = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
        sims = unit @ unit.T
    else:
        sims = signs @ signs.T
    scores = mean_window_scores(sims[np.ix_(keep, keep)], owner[keep], n).astype(np.float64)
    np.fill_diagonal(scores, -np.inf)
    return scores


def top10_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over queries of |top-10(a) & top-10(b)| / 10."""
    top_a, top_b = (np.argsort(-s, axis=1, kind="stable")[:, :10] for s in (a, b))
    return float(np.mean([len(set(x) & set(y)) / 10 for x, y in zip(top_a, top_b)]))


def quality(encoder: Any, data: Path) -> dict[str, Any]:
    from bench.audio.sets import encoder_system, evaluation_sets, load_clips, qbe_map, windowed

    out = {}
    for name, (labels, paths) in evaluation_sets(data).items():
        flat, owner, keep = None, None, None
        runs = {}
        for precision in ("float32", "int8"):
            embed, window_s, hop_s = encoder_system(AtPrecision(encoder, precision))
            if flat is None:
                flat, owner, keep = windowed(load_clips(paths), window_s, hop_s)
            floats, signs = embed(flat)
            runs[precision] = (floats, signs, qbe_map(floats, signs, owner, labels, keep))
        row: dict[str, Any] = {"clips": len(labels)}
        for kind in ("float", "hamming"):
            exact, fast = runs["float32"][2][kind], runs["int8"][2][kind]
            scored = [item_scores(f, s, owner, keep, len(labels), kind) for f, s, _ in runs.values()]
            row[kind] = {"map_float32": exact, "map_int8": fast, "map_change": round(fast - exact, 4),
                         "top10_overlap": round(top10_overlap(*scored), 3)}
        out[name] = row
        print(name, row, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    from app.encoders.registry import create_encoder, discover

    parser = argparse.ArgumentParser(prog="python -m bench.audio.frontend_int8")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--encoder", default="general-audio")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="bench/results/audio_frontend_int8.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    encoder = create_encoder(args.encoder, discover())
    pair = {precision: AtPrecision(encoder, precision) for precision in ("float32", "int8")}
    speed = {"ms_query_window_as_served_median": query_median_ms(pair, windows(2), 50),
             "ms_per_window_batch_32": interleaved_best_ms(pair, windows(32), args.repeats)}
    speed["speedup"] = {k: round(v["float32"] / v["int8"], 2) for k, v in speed.items()}
    print(speed, flush=True)
    sets = quality(encoder, Path(args.data))
    worst_drop = min(min(row[k]["map_change"] for k in ("float", "hamming")) for row in sets.values())
    worst_overlap = min(min(row[k]["top10_overlap"] for k in ("float", "hamming")) for row in sets.values())
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "encoder": f"{encoder.name}@{encoder.version}",
              "torch_threads": 1, "cpus": os.cpu_count(), "load_average_1_5_15": list(os.getloadavg()),
              "speed": speed, "quality": sets,
              "rule": {"max_map_drop": MAX_MAP_DROP, "min_top10_overlap": MIN_OVERLAP,
                       "worst_map_change": worst_drop, "worst_top10_overlap": worst_overlap,
                       "met": worst_drop >= -MAX_MAP_DROP and worst_overlap >= MIN_OVERLAP}}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"rule met: {report['rule']['met']} -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
