"""The generalisation bench's evaluation sets and its scoring, as the service ranks (bench/audio/generalisation.py).

Below both the bench and its leave-one-corpus-out part (bench/audio/loco.py), which score the same way, so neither
imports the other back.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.encoders.base import Encoder
from app.features.windows import audible, cut_windows
from app.training.general_audio import data as recipe
from app.training.retrieval import best_window_scores, mean_window_scores, retrieval_metrics
from app.training.general_audio.router_data import HOP_S, WINDOW_S

RATE = 16000
CORPUS_OF = {"asc_unseen_speakers": "asc", "asc_unseen_words": "asc", "fsdd_unseen_speakers": "fsdd",
             "fsdd_unseen_words": "fsdd", "esc_unseen_classes": "esc"}


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
        "fsdd_unseen_words": [(r["digit"], data / "fsdd" / r["file"]) for r in fsdd
                              if r["speaker"] in recipe.FSDD_HOLDOUT_SPEAKERS and r["digit"] in recipe.FSDD_HOLDOUT_WORDS],
        "esc_unseen_classes": [(r["category"], data / "esc50" / r["filename"]) for r in esc
                               if r["category"] in recipe.ESC_HOLDOUT_CLASSES],
    }
    return {name: ([label for label, _ in rows], [path for _, path in rows]) for name, rows in pick.items()}


def load_clips(paths: list[Path]) -> list[np.ndarray]:
    from app.training.audio.data import Record, load_waves

    return load_waves([Record(str(p), "") for p in paths], RATE, cache_dir="/tmp/recall-audio-cache")


def best_pair_scores(window_sims: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """(items, items) best-window-pair similarity from (windows, windows) similarities
    (``item_distance = min``)."""
    per_query_window = best_window_scores(window_sims, owner, n)  # (windows, items)
    return best_window_scores(per_query_window.T, owner, n).T


def qbe_map(floats: np.ndarray, signs: np.ndarray | None, owner: np.ndarray, labels: list[str],
            kept: np.ndarray | None = None) -> dict[str, float]:
    """MAP as the service ranks now (the ``kept`` windows only, see :func:`windowed`; the mean rule)
    and before (every window, the best pair: ``*_before``)."""
    labels_arr, n = np.asarray(labels), len(labels)
    keep = np.ones(len(owner), bool) if kept is None else kept
    unit = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
    sims = {"float": unit @ unit.T}
    if signs is not None:
        # -Hamming distance = (s.s - bits) / 2: the same order as the service's Hamming search
        sims["hamming"] = signs @ signs.T
    out = {}
    for kind, sim in sims.items():
        now = mean_window_scores(sim[np.ix_(keep, keep)], owner[keep], n)
        out[kind] = retrieval_metrics(now, labels_arr)["map"]
        out[kind + "_before"] = retrieval_metrics(best_pair_scores(sim, owner, n), labels_arr)["map"]
    return {k: round(float(v), 4) for k, v in out.items()}


def windowed(clips: list[np.ndarray], window_s: float, hop_s: float) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Every window of every clip, the clip each came from, and which ones the service keeps."""
    flat, owner, keep = [], [], []
    for i, clip in enumerate(clips):
        windows = cut_windows(clip, RATE, window_s, hop_s)[0]
        flat += windows
        owner += [i] * len(windows)
        keep.append(audible(windows))
    return flat, np.asarray(owner), np.concatenate(keep)


def encoder_system(encoder: Encoder) -> tuple[Callable, float, float]:
    import soxr

    def embed(windows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        if encoder.sample_rate != RATE:
            windows = [soxr.resample(w, RATE, encoder.sample_rate) for w in windows]
        emb = encoder.encode(windows)
        return emb.floats, np.unpackbits(emb.codes, axis=1, bitorder="little").astype(np.float32) * 2 - 1

    return embed, encoder.default_window_s or 1.0, encoder.default_hop_s or 0.5


def baseline_system(fn: Callable) -> tuple[Callable, float, float]:
    return (lambda windows: (fn(windows), None)), WINDOW_S, HOP_S


def frontend_system(fn: Callable) -> tuple[Callable, float, float]:
    """A frozen pretrained front-end (app/eval/frontend_baselines.py): floats and sign codes, no head."""
    return fn, WINDOW_S, HOP_S


def score(system: tuple[Callable, float, float], clips: list[np.ndarray], labels: list[str]) -> dict[str, Any]:
    embed, window_s, hop_s = system
    flat, owner, keep = windowed(clips, window_s, hop_s)
    started = time.perf_counter()
    floats, signs = embed(flat)
    result: dict[str, Any] = qbe_map(floats, signs, owner, labels, keep)
    result["embed_s"] = round(time.perf_counter() - started, 2)
    return result
