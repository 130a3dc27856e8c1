"""Does the default audio encoder generalise? Query-by-example on data disjoint from its training.

    python -m bench.audio_generalisation --data ../shared/data [--loco asc=DIR,fsdd=DIR,esc=DIR]

Writes reports/audio/generalisation.{json,md}. The protocol is what a user of the service gets:
an audio collection with the encoder's default window and hop, every clip searches the others
(leave-one-out), an item scores its best pair of windows, relevant = same label. MAP is reported
for float (cosine) and Hamming search. Sets (held-out lists in app/training/general_audio.py):

- ``asc_unseen_speakers``: Arabic keywords trained on, said by 5 speakers no model trained on;
- ``asc_unseen_words``: the 8 keywords held out of training, by the same unseen speakers;
- ``fsdd_unseen_speakers``: English digits by the 2 FSDD speakers held out;
- ``esc_unseen_classes``: the 8 ESC-50 classes held out.

With ``--loco``, each checkpoint trained without one corpus (``recall train general-audio
--without X``) is scored on that corpus's sets: leave-one-corpus-out. Training-free baselines
(app/eval/audio_baselines.py and the ``audio-baseline`` encoder) are measured in the same run.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.encoders.base import Encoder
from app.eval.audio_baselines import BASELINES
from app.features.windows import cut_windows
from app.training import general_audio as recipe
from app.training.retrieval import best_window_scores, retrieval_metrics

RATE = 16000
CORPUS_OF = {"asc_unseen_speakers": "asc", "asc_unseen_words": "asc", "fsdd_unseen_speakers": "fsdd",
             "esc_unseen_classes": "esc"}
TRAINED = ("general-audio", "speech-attn-hash", "sounds-texture")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def evaluation_sets(data: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """Each set's labels and files."""
    asc = _rows(data / "asc" / "asc.csv")
    fsdd = _rows(data / "fsdd" / "fsdd.csv")
    esc = _rows(data / "esc50" / "esc50.csv")
    held = set(recipe.ASC_HOLDOUT_SPEAKERS)
    pick = {
        "asc_unseen_speakers": [(r["keyword"], data / "asc" / r["file"]) for r in asc
                                if r["speaker"] in held and r["keyword"] not in recipe.ASC_HOLDOUT_WORDS],
        "asc_unseen_words": [(r["keyword"], data / "asc" / r["file"]) for r in asc
                             if r["speaker"] in held and r["keyword"] in recipe.ASC_HOLDOUT_WORDS],
        "fsdd_unseen_speakers": [(r["digit"], data / "fsdd" / r["file"]) for r in fsdd
                                 if r["speaker"] in recipe.FSDD_HOLDOUT_SPEAKERS],
        "esc_unseen_classes": [(r["category"], data / "esc50" / r["filename"]) for r in esc
                               if r["category"] in recipe.ESC_HOLDOUT_CLASSES],
    }
    return {name: ([label for label, _ in rows], [path for _, path in rows]) for name, rows in pick.items()}


def load_clips(paths: list[Path]) -> list[np.ndarray]:
    from app.training.audio_data import Record, load_waves

    return load_waves([Record(str(p), "") for p in paths], RATE, cache_dir="/tmp/recall-audio-cache")


def item_scores(window_sims: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """(items, items) best-window-pair similarity from (windows, windows) similarities."""
    per_query_window = best_window_scores(window_sims, owner, n)  # (windows, items)
    return best_window_scores(per_query_window.T, owner, n).T


def qbe_map(floats: np.ndarray, signs: np.ndarray | None, owner: np.ndarray, labels: list[str]) -> dict[str, float]:
    labels_arr, n = np.asarray(labels), len(labels)
    unit = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
    out = {"float": retrieval_metrics(item_scores(unit @ unit.T, owner, n), labels_arr)["map"]}
    if signs is not None:
        # -Hamming distance = (s.s - bits) / 2: the same order as the service's Hamming search
        out["hamming"] = retrieval_metrics(item_scores(signs @ signs.T, owner, n), labels_arr)["map"]
    return {k: round(float(v), 4) for k, v in out.items()}


def windowed(clips: list[np.ndarray], window_s: float, hop_s: float) -> tuple[list[np.ndarray], np.ndarray]:
    flat, owner = [], []
    for i, clip in enumerate(clips):
        windows = cut_windows(clip, RATE, window_s, hop_s)[0]
        flat += windows
        owner += [i] * len(windows)
    return flat, np.asarray(owner)


def encoder_system(encoder: Encoder) -> tuple[Callable, float, float]:
    import soxr

    def embed(windows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if encoder.sample_rate != RATE:
            windows = [soxr.resample(w, RATE, encoder.sample_rate) for w in windows]
        emb = encoder.encode(windows)
        return emb.floats, np.unpackbits(emb.codes, axis=1, bitorder="little").astype(np.float32) * 2 - 1

    return embed, encoder.default_window_s or 1.0, encoder.default_hop_s or 0.5


def baseline_system(fn: Callable) -> tuple[Callable, float, float]:
    return (lambda windows: (fn(windows), None)), recipe.WINDOW_S, recipe.HOP_S


def score(system: tuple[Callable, float, float], clips: list[np.ndarray], labels: list[str]) -> dict[str, Any]:
    embed, window_s, hop_s = system
    flat, owner = windowed(clips, window_s, hop_s)
    started = time.perf_counter()
    floats, signs = embed(flat)
    result: dict[str, Any] = qbe_map(floats, signs, owner, labels)
    result["embed_s"] = round(time.perf_counter() - started, 2)
    return result


def markdown(report: dict[str, Any]) -> str:
    sets = list(report["sets"])
    lines = ["# Audio generalisation: query-by-example on data disjoint from training", "",
             f"Written by `python -m bench.audio_generalisation` on {report['date']} ({report['machine']}).",
             "MAP, float / Hamming; baselines are training-free and measured in the same run.", "",
             "| system | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for system, row in report["results"].items():
        cells = []
        for s in sets:
            r = row.get(s)
            cells.append("" if r is None else f"{r['float']:.3f}" + (f" / {r['hamming']:.3f}" if "hamming" in r else ""))
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines += ["", "Sets: " + "; ".join(f"`{s}` {v['clips']} clips, {v['labels']} labels" for s, v in report["sets"].items()), ""]
    if report.get("targets"):
        lines += ["## Targets (issue 13)", "", "| target | needed | result | met |", "|---|---|---|---|"]
        for t in report["targets"]:
            lines.append(f"| {t['what']} | {t['needed']} | {t['result']} | {'yes' if t['met'] else '**no**'} |")
    return "\n".join(lines) + "\n"


def targets(results: dict[str, dict[str, Any]], default: str) -> list[dict[str, Any]]:
    d, mfcc, logmel = results[default], results["mfcc-levin"], results["logmel-mean-std"]
    out = []

    def add(what: str, needed: float, value: float, kind: str = "float") -> None:
        out.append({"what": f"{what} ({kind})", "needed": f">= {needed:.3f}", "result": f"{value:.3f}", "met": value >= needed})

    for kind in ("float", "hamming"):
        add("keywords, unseen speakers MAP >= 0.85", 0.85, d["asc_unseen_speakers"][kind], kind)
        add("English digits, unseen speakers >= 1.5x MFCC", 1.5 * mfcc["fsdd_unseen_speakers"]["float"], d["fsdd_unseen_speakers"][kind], kind)
        add("unseen sound classes >= 1.5x log-mel", 1.5 * logmel["esc_unseen_classes"]["float"], d["esc_unseen_classes"][kind], kind)
        add("unseen words >= 1.3x MFCC", 1.3 * mfcc["asc_unseen_words"]["float"], d["asc_unseen_words"][kind], kind)
    for s in results[default]:
        add(f"Hamming >= 0.95x float, {s}", 0.95 * d[s]["float"], d[s]["hamming"], "ratio")
    for name, row in results.items():
        if not name.startswith("loco"):
            continue
        for s, r in row.items():
            best = max(results[b][s]["float"] for b in ("mfcc-levin", "logmel-mean-std", "audio-baseline"))
            for kind in ("float", "hamming"):
                add(f"{name} on {s} above the best baseline", best, r[kind], kind)
    return out


def main(argv: list[str] | None = None) -> int:
    import platform

    from app.encoders.registry import create_encoder, discover, load_checkpoint_dir
    from app.settings import Settings

    parser = argparse.ArgumentParser(prog="python -m bench.audio_generalisation")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="reports/audio")
    parser.add_argument("--encoders", default=",".join(TRAINED))
    parser.add_argument("--loco", default="", help="corpus=checkpoint dir pairs, e.g. asc=.gl/loco-asc,esc=.gl/loco-esc")
    args = parser.parse_args(argv)

    sets = evaluation_sets(Path(args.data))
    clips = {name: load_clips(paths) for name, (_, paths) in sets.items()}
    specs = discover()
    systems: dict[str, tuple[Callable, float, float]] = {name: baseline_system(fn) for name, fn in BASELINES.items()}
    for name in ["audio-baseline", *[e for e in args.encoders.split(",") if e]]:
        # a registered name, or a checkpoint directory (a run not installed in app/assets/models)
        encoder = load_checkpoint_dir(name) if Path(name).is_dir() else create_encoder(name, specs)
        systems[name if not Path(name).is_dir() else encoder.name] = encoder_system(encoder)
    loco: dict[str, str] = dict(pair.split("=", 1) for pair in args.loco.split(",") if pair)

    results: dict[str, dict[str, Any]] = {}
    for name, system in systems.items():
        results[name] = {s: score(system, clips[s], sets[s][0]) for s in sets}
        print(name, {s: (r["float"], r.get("hamming")) for s, r in results[name].items()}, flush=True)
    for corpus, directory in loco.items():
        system = encoder_system(load_checkpoint_dir(directory))
        results[f"loco: without {corpus}"] = {s: score(system, clips[s], sets[s][0]) for s in sets if CORPUS_OF[s] == corpus}
        print(f"loco {corpus}", results[f"loco: without {corpus}"], flush=True)

    default = Settings().encoders.default_audio
    report = {"date": time.strftime("%Y-%m-%d"), "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
              "default_encoder": default,
              "sets": {s: {"clips": len(v[0]), "labels": len(set(v[0]))} for s, v in sets.items()},
              "results": results,
              "targets": targets(results, default) if default in results else []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "generalisation.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "generalisation.md").write_text(markdown(report))
    print(f"-> {out / 'generalisation.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
