"""What the image-text encoder's query-embedding cache saves, cache on and off in the same run.

    python -m bench.service.text_cache [--rounds 200] [--out bench/results/text_cache.json]

Two copies of the default image-text encoder, one with its cache disabled, take turns on the same work:
``repeat``: one query string embedded again (a repeated search); ``search``: a new string embedded for stage 1
and again for the re-ranking head over 100 candidates (what one re-ranked text search asks of the encoder).
A cached embedding is the encoder's own (``same_embedding``, checked here), so the answers cannot change: issue
35's rule for speed changes holds with quality change 0 and top-10 overlap 1.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parents[1] / "results" / "text_cache.json"


def main(argv: list[str] | None = None) -> int:
    import torch

    from app.encoders.registry import create_encoder, discover
    from app.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m bench.service.text_cache")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    name, specs = Settings().encoders.default_image, discover()
    encoders = {"cache_on": create_encoder(name, specs), "cache_off": create_encoder(name, specs)}
    encoders["cache_off"]._text_cache_size = 0
    candidates = np.random.default_rng(0).standard_normal((100, encoders["cache_on"].dim)).astype(np.float32)
    work = {
        "repeat": lambda e, i: e.encode_text(["a large blue square on a grey background"]),
        "search": lambda e, i: (e.encode_text([f"query number {i}"]), e.rerank(f"query number {i}", candidates)),
    }
    for encoder in encoders.values():
        encoder.encode_text(["warm up"])
    times = {task: {label: [] for label in encoders} for task in work}
    for i in range(args.rounds):
        for task, run in work.items():
            for label, encoder in encoders.items():
                started = time.perf_counter()
                run(encoder, i)
                times[task][label].append(time.perf_counter() - started)
    same = bool(np.allclose(encoders["cache_on"].encode_text(["a red circle"]).floats,
                            encoders["cache_off"].encode_text(["a red circle"]).floats, atol=1e-6))
    p50 = {task: {label: round(1000 * float(np.median(t)), 3) for label, t in by.items()} for task, by in times.items()}
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(), "load_average_1_5_15": list(os.getloadavg()),
              "encoder": name, "rounds": args.rounds, "p50_ms": p50,
              "saved_ms_p50": {task: round(v["cache_off"] - v["cache_on"], 3) for task, v in p50.items()},
              "same_embedding": same,  # a cached query is the encoder's own embedding: answers cannot change
              "hits": encoders["cache_on"].text_cache_hits, "misses": encoders["cache_on"].text_cache_misses}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
