"""In-process cost of one 1 s window through the default audio encoder, per checkpoint version.

    python -m bench.audio.window_cost [--encoders general-audio-commercial,general-audio-commercial:before] [--repeats 5]

Writes bench/results/audio_window_cost.json: milliseconds per window on one torch thread, for a
single window (a query; all on the calling thread, and as served, with general-audio's two halves on
two threads) and for batches of 32 (ingest), best of ``--repeats`` runs (the machine is
shared, so the best run is the least disturbed one; the encoders take turns). Windows are speech-like (a harmonic tone with
a syllable-rate envelope, so the router sends them to the speech half and the speech views run) and
noise (sounds half); general-audio version 3's speech views run on every window either way.

``NAME:before`` is encoder NAME run as the code before the speed round of issues 35/37 (the same answers bit for
bit, tests/features/test_ort_blocked.py): onnxruntime's own graph of the speech front-end (its Clips not kept on
blocked tensors, app/features/pretrained/ort_blocked.py) and a lone query's halves side by side, the front-end on
one thread (app/encoders/audio/routed_fusion.py), so old and new code take turns in one run. ``NAME:one_core`` and
``NAME:both_cores`` fix a lone query's schedule (the blocked graph either way) where NAME alone chooses the faster
lately (app/encoders/faster_path.py). ``stages_ms`` times the default's traced steps alone, one after the other
on one thread: where a query's milliseconds go.
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


VARIANTS = ("before", "one_core", "both_cores")


class Variant:
    """``encoder`` with the speed round's switches set while it encodes (see the module docstring)."""

    def __init__(self, encoder, variant: str) -> None:
        self.encoder, self.version, self.dim, self.bits = encoder, encoder.version, encoder.dim, encoder.bits
        self.schedule = "one_core" if variant == "before" else variant
        self.blocked = variant != "before"

    def encode(self, inputs):
        from app.encoders.audio import routed_fusion
        from app.features.pretrained import ort_convs

        routed_fusion.LONE_QUERY_FRONTEND = self.schedule
        ort_convs.set_blocked(self.blocked)
        try:
            return self.encoder.encode(inputs)
        finally:
            routed_fusion.LONE_QUERY_FRONTEND = "choose"
            ort_convs.set_blocked(True)


def stages_ms(encoder, window: np.ndarray, rounds: int = 200) -> dict[str, float]:
    """Median milliseconds of each traced step of a routed-fusion encoder on one window, the steps taking turns."""
    import torch

    from app.features.pretrained import ort_convs

    steps = encoder.steps.get("cpu")
    waves = encoder._fitted([window])
    audio, speech_waves = torch.from_numpy(waves), encoder._speech_waves(waves)
    with torch.inference_mode():
        frames = steps.frames(speech_waves)
        halves = (*steps.head(frames), *steps.sounds(audio))

        def two_threads():
            with ort_convs.intra_op_threads(2):
                steps.frames(speech_waves)

        def plain_graph():
            ort_convs.set_blocked(False)
            try:
                steps.frames(speech_waves)
            finally:
                ort_convs.set_blocked(True)

        work = {"speech_frames_one_thread": lambda: steps.frames(speech_waves),
                "speech_frames_one_thread_before": plain_graph,
                "speech_frames_two_threads": two_threads,
                "speech_head": lambda: steps.head(frames),
                "sounds_half": lambda: steps.sounds(audio),
                "join": lambda: steps.join(*halves),
                "encode_as_served": lambda: encoder.encode([window])}
        times: dict[str, list[float]] = {name: [] for name in work}
        for run in work.values():
            run()
        for _ in range(rounds):
            for name, run in work.items():
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
    return {name: round(1000 * float(np.median(t)), 3) for name, t in times.items()}


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
    parser.add_argument("--encoders", default="general-audio-commercial,general-audio-commercial:before,"
                        "general-audio-commercial:one_core,general-audio-commercial:both_cores,general-audio")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=150, help="query-median rounds (two windows each)")
    parser.add_argument("--out", default="bench/results/audio_window_cost.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    specs = discover()
    from app.encoders.audio import routed_fusion

    loaded: dict[str, object] = {}
    encoders = {}
    for name in args.encoders.split(","):
        base, _, variant = name.partition(":")
        if variant and variant not in VARIANTS:
            parser.error(f"{name}: the variants are NAME:{', NAME:'.join(VARIANTS)}")
        if base not in loaded:
            loaded[base] = create_encoder(base, specs)
        encoders[name] = Variant(loaded[base], variant) if variant else loaded[base]
    served = routed_fusion.SIDE_THREAD_MAX_WINDOWS
    single = {}
    # "one thread": everything on the calling thread; "as served": a query's window runs the speech and
    # sound halves on two threads (app/encoders/side_thread.py), as the service does
    for mode, side in (("one_thread", 0), ("as_served", served)):
        routed_fusion.SIDE_THREAD_MAX_WINDOWS = side
        runs = [interleaved_best_ms(encoders, [w], args.repeats) for w in windows(2)]  # speech-like, noise
        single[mode] = {name: min(r[name] for r in runs) for name in encoders}
    routed_fusion.SIDE_THREAD_MAX_WINDOWS = served
    median = query_median_ms(encoders, windows(2), args.rounds)
    batch = interleaved_best_ms(encoders, windows(32), args.repeats)
    first = next(iter(loaded.values()))
    stages = {kind: stages_ms(first, w) for kind, w in zip(("speech_like", "noise"), windows(2))} \
        if hasattr(getattr(first, "steps", None), "eager") and hasattr(first.steps.eager, "frames") else {}
    results = {name: {"version": e.version, "dim": e.dim, "bits": e.bits,
                      "ms_per_window_batch_1_one_thread": single["one_thread"][name],
                      "ms_per_window_batch_1_as_served": single["as_served"][name],
                      "ms_query_window_as_served_median": median[name],
                      "ms_per_window_batch_32": batch[name]}
               for name, e in encoders.items()}
    for name, row in results.items():
        print(name, row, flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "torch_threads": 1, "cpus": os.cpu_count(),
              "load_average_1_5_15": list(os.getloadavg()), "repeats": args.repeats,
              "query_median_of": 2 * args.rounds, "results": results,
              "stages_ms": {"encoder": next(iter(loaded)), "windows": stages} if stages else {}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
