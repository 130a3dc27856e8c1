"""`recall train audio --model texture-mlp`: fit a sound-texture encoder and write its checkpoint.

The held-out classes (``--holdout``) are never read for fitting. Instead of one small validation
split (4 classes of ~8 clips gave MAP estimates that disagreed with each other by +-0.1), the
choice of settings rests on class-disjoint cross-validation over the training classes: each fold
holds ``cv_classes`` classes out, fits on the rest and measures clip-retrieval MAP on the held
classes the way reports/audio measures it (an energetic window as the query, every window of
every clip as an item, a clip scored by its best window). The checkpoint itself is then fitted
on all training classes; its metrics.json carries the folds' MAP.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.checkpoint import save_checkpoint
from app.encoders.audio.texture import FAMILY, TextureNet
from app.features.spectrogram import build_features
from app.features.texture import TextureStats
from app.features.windows import cut_windows
from app.training.audio.data import Record, load_waves, read_manifest
from app.training.audio.augment import augmented_copy, eval_window
from app.training.retrieval import best_window_scores, retrieval_metrics
from app.training.audio.texture_fit import HeadTraining, fit_texture_net

STATS_CHUNK = 256  # windows per frontend call: bounds memory


@dataclass
class TextureTrainConfig:
    manifest: str
    out: str
    name: str
    holdout: list[str] = field(default_factory=list)
    sample_rate: int = 16000
    window_s: float = 2.0
    hop_s: float = 1.0  # default hop over long recordings, and the items' hop in cross-validation
    train_hop_s: float = 0.25  # dense windows for fitting: ~4x the examples of a 1-s hop
    augment_copies: int = 0  # per training clip: speed, noise and gain changed (augment.augmented_copy)
    n_mels: int = 64
    bands: int = 16
    mod_bins: int = 8
    pcen: bool = True  # PCEN statistics next to the log-mel ones (app/features/texture.py)
    whiten_dim: int = 128
    whiten_eps: float = 0.01
    hidden: int = 256
    head_dim: int = 128
    dropout: float = 0.2
    head: HeadTraining = field(default_factory=HeadTraining)
    cv_folds: int = 8
    cv_classes: int = 4
    seed: int = 0
    cache_dir: str | None = "/tmp/recall-audio-cache"
    threads: int = 2
    description: str = ""
    command: str = ""

    @property
    def bits(self) -> int:
        return self.whiten_dim + self.head_dim

    def features(self) -> dict[str, Any]:
        return {"kind": "texture", "sample_rate": self.sample_rate, "n_mels": self.n_mels, "bands": self.bands,
                "mod_bins": self.mod_bins, "win_ms": 25.0, "hop_ms": 10.0, "pcen": self.pcen}


def window_stats(frontend: TextureStats, windows: list[np.ndarray]) -> np.ndarray:
    """(n, n_stats) statistics of equal-length windows."""
    out = []
    with torch.inference_mode():
        for start in range(0, len(windows), STATS_CHUNK):
            batch = torch.from_numpy(np.stack(windows[start : start + STATS_CHUNK]).astype(np.float32))
            out.append(frontend(batch)[:, 0].numpy())
    return np.concatenate(out) if out else np.zeros((0, 0), np.float32)


class ClipStats:
    """Every clip's statistics, computed once: dense training windows (of the clips and of their
    augmented copies, each owned by its clip) and, for scoring (``evaluation``), item windows and
    one query window of the clips themselves."""

    def __init__(self, cfg: TextureTrainConfig, frontend: TextureStats, waves: list[np.ndarray],
                 evaluation: bool = True) -> None:
        length = int(round(cfg.window_s * cfg.sample_rate))
        self.dense, self.dense_owner = self._windows(cfg, frontend, waves, cfg.train_hop_s)
        if cfg.augment_copies > 0:
            dense, owner = self._augmented_windows(cfg, frontend, waves)
            self.dense = np.concatenate([self.dense, dense])
            self.dense_owner = np.concatenate([self.dense_owner, owner])
        if evaluation:
            self.query = window_stats(frontend, [eval_window(w, length) for w in waves])
            self.items, self.item_owner = self._windows(cfg, frontend, waves, cfg.hop_s)

    @classmethod
    def _augmented_windows(cls, cfg: TextureTrainConfig, frontend: TextureStats, waves: list[np.ndarray]):
        """Dense windows of ``cfg.augment_copies`` seeded copies of every clip, owned by that clip."""
        rng = np.random.default_rng(cfg.seed)
        copies = [augmented_copy(wave, rng) for wave in waves for _ in range(cfg.augment_copies)]
        stats, copy_owner = cls._windows(cfg, frontend, copies, cfg.train_hop_s)
        return stats, copy_owner // cfg.augment_copies  # copy c belongs to clip c // copies

    @staticmethod
    def _windows(cfg: TextureTrainConfig, frontend: TextureStats, waves: list[np.ndarray], hop_s: float):
        length = int(round(cfg.window_s * cfg.sample_rate))
        windows, owner = [], []
        for i, wave in enumerate(waves):
            cut = cut_windows(wave, cfg.sample_rate, cfg.window_s, hop_s)[0]
            windows += [eval_window(w, length) for w in cut]  # a clip shorter than a window is centred in zeros
            owner += [i] * len(cut)
        return window_stats(frontend, windows), np.asarray(owner)


def clip_map(net: TextureNet, stats: ClipStats, clips: np.ndarray, labels: np.ndarray) -> float:
    """MAP of clip-by-example retrieval among ``clips`` (indices), a clip scored by its best window."""
    with torch.no_grad():
        queries = net(torch.from_numpy(stats.query[clips])[:, None]).numpy()
        mask = np.isin(stats.item_owner, clips)
        items = net(torch.from_numpy(stats.items[mask])[:, None]).numpy()
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    items /= np.linalg.norm(items, axis=1, keepdims=True)
    owner = np.searchsorted(clips, stats.item_owner[mask])
    return retrieval_metrics(best_window_scores(queries @ items.T, owner, len(clips)), labels[clips])["map"]


def _arch(cfg: TextureTrainConfig, n_in: int) -> dict[str, Any]:
    return {"n_in": n_in, "whiten_dim": cfg.whiten_dim, "hidden": cfg.hidden, "head_dim": cfg.head_dim,
            "bits": cfg.bits, "dropout": cfg.dropout}


def _fit(cfg: TextureTrainConfig, stats: ClipStats, labels: np.ndarray, classes: set[str]) -> tuple[TextureNet, list[float]]:
    rows = np.flatnonzero(np.isin(labels[stats.dense_owner], sorted(classes)))
    return fit_texture_net(stats.dense[rows], labels[stats.dense_owner[rows]], _arch(cfg, stats.dense.shape[1]),
                           cfg.whiten_eps, cfg.head, rotation_seed=cfg.seed)


def cross_validate(cfg: TextureTrainConfig, stats: ClipStats, labels: np.ndarray, classes: list[str]) -> list[dict[str, Any]]:
    """Class-disjoint folds over the training classes: fit without a fold's classes, score on them."""
    if cfg.cv_folds <= 0:
        return []
    if cfg.cv_classes < 2 or len(classes) - cfg.cv_classes < 2:
        raise ValueError(f"cross-validation holding {cfg.cv_classes} of {len(classes)} classes out leaves too few on one side")
    rng = np.random.default_rng(cfg.seed + 7)
    folds = []
    for _ in range(cfg.cv_folds):
        held = sorted(rng.choice(classes, size=cfg.cv_classes, replace=False).tolist())
        net, _ = _fit(cfg, stats, labels, set(classes) - set(held))
        clips = np.flatnonzero(np.isin(labels, held))
        folds.append({"classes": held, "map": clip_map(net, stats, clips, labels)})
    return folds


def train_texture(cfg: TextureTrainConfig) -> dict[str, Any]:
    """Cross-validate, fit on every training class, write the checkpoint; returns its metrics."""
    torch.set_num_threads(cfg.threads)
    started = time.time()
    if cfg.augment_copies < 0:
        raise ValueError(f"augment copies must be 0 or more, got {cfg.augment_copies}")
    records: list[Record] = read_manifest(cfg.manifest)
    unknown = sorted(set(cfg.holdout) - {r.label for r in records})
    if unknown:
        raise ValueError(f"held-out labels {unknown} are not in the manifest")
    records = [r for r in records if r.label not in set(cfg.holdout)]
    classes = sorted({r.label for r in records})
    if len(classes) < 2:
        raise ValueError(f"need at least 2 training classes, the manifest has {classes}")
    frontend = build_features(cfg.features())  # the same constructor the service's loader uses
    stats = ClipStats(cfg, frontend, load_waves(records, cfg.sample_rate, cfg.cache_dir), evaluation=cfg.cv_folds > 0)
    labels = np.array([r.label for r in records])

    folds = cross_validate(cfg, stats, labels, classes)
    net, losses = _fit(cfg, stats, labels, set(classes))
    config = {
        "family": FAMILY, "modality": "audio", "name": cfg.name, "description": cfg.description,
        "sample_rate": cfg.sample_rate, "window_s": cfg.window_s, "hop_s": cfg.hop_s, "bits": cfg.bits,
        "features": cfg.features(), "arch": _arch(cfg, stats.dense.shape[1]),
        "training": {**{k: v for k, v in asdict(cfg).items() if k not in ("command", "description", "head")},
                     "head": asdict(cfg.head)},
        "split": {"by": "label", "holdout": cfg.holdout, "train": classes},
        "command": cfg.command,
        "reproduce": {"train": cfg.command, "note": "CPU, about 15 s on 2 cores; reads the original FLAC files"},
    }
    metrics = {
        "cv_map": float(np.mean([f["map"] for f in folds])) if folds else None,
        "cv_map_std": float(np.std([f["map"] for f in folds])) if folds else None,
        "cv_folds": folds, "train_windows": int(len(stats.dense)), "train_clips": len(records),
        "loss_first": losses[0] if losses else None, "loss_last": float(np.mean(losses[-20:])) if losses else None,
        "seconds": round(time.time() - started, 1),
    }
    save_checkpoint(cfg.out, net.state_dict(), config, metrics)
    return metrics
