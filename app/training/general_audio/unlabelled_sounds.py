"""general-audio's sounds branch when the recipe has no labelled sounds (``--without esc``).

A texture model is two learned maps on fixed statistics: an unsupervised whitening and a metric head
trained on sound classes (app/encoders/audio/texture.py). Without ESC-50 there are no sound classes, and
the first recipe trained the head on spoken English words instead: on the unseen ESC-50 classes that
head alone scored 0.48 MAP and pulled the branch under the log-mel baseline (reports/audio/README.md).
So, with ``--sounds-without-labels whiten``, the branch keeps only what needs no labels: a whitening of
the statistics (``head_dim = 0``) fitted on the unlabelled audio the recipe does have, synthetic
English words and generated non-speech, turned by a seeded rotation for its code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.checkpoint import save_checkpoint
from app.encoders.audio.texture import FAMILY, TextureNet
from app.features.spectrogram import build_features
from app.training.audio.texture_fit import fit_whitening, random_rotation
from app.training.audio.texture_train import TextureTrainConfig, window_stats

# chosen on a dev set (the 17 ESC-50 training-side classes, which a --without esc run never hears) among
# 256 / 192 / 128 / 64 directions and floors 0.01 / 0.03 / 0.1, by Hamming MAP over four rotation seeds
# (reports/audio/README.md, "Version 4")
WHITEN_DIM = 256  # the whole sounds half of the code: 256 bits from 256 whitened directions
WHITEN_EPS = 0.1  # eigenvalue floor, a fraction of the largest


def fit_whitening_only(windows: list[np.ndarray], out: Path, name: str, seed: int, sample_rate: int,
                       window_s: float, hop_s: float, sources: dict[str, int]) -> dict[str, Any]:
    """Write a head-less texture checkpoint fitted on ``windows`` (equal length, no labels); returns its metrics.

    ``sources`` (what the windows are, how many of each) is recorded in the config.
    """
    cfg = TextureTrainConfig(manifest="", out=str(out), name=name, sample_rate=sample_rate, window_s=window_s,
                             hop_s=hop_s, whiten_dim=WHITEN_DIM, whiten_eps=WHITEN_EPS, head_dim=0, cv_folds=0, seed=seed)
    features = build_features(cfg.features())
    stats = window_stats(features, windows)
    arch = {"n_in": int(stats.shape[1]), "whiten_dim": WHITEN_DIM, "hidden": cfg.hidden, "head_dim": 0, "bits": WHITEN_DIM,
            "dropout": cfg.dropout}
    net = TextureNet(**arch)
    mean, whiten = fit_whitening(stats, WHITEN_DIM, WHITEN_EPS)
    with torch.no_grad():
        net.whiten_mean.copy_(torch.from_numpy(mean))
        net.whiten.copy_(torch.from_numpy(whiten))
        net.rotation.copy_(torch.from_numpy(random_rotation(WHITEN_DIM, seed)))
    config = {
        "family": FAMILY, "modality": "audio", "name": name, "sample_rate": sample_rate, "window_s": window_s,
        "hop_s": hop_s, "bits": WHITEN_DIM, "features": cfg.features(), "arch": arch,
        "description": "sound-texture statistics, whitened without labels (no metric head: no labelled sounds)",
        "training": {"unlabelled_windows": sources, "whiten_eps": WHITEN_EPS, "rotation_seed": seed},
    }
    metrics = {"train_windows": len(windows)}
    save_checkpoint(out, net.state_dict(), config, metrics)
    return metrics
