"""Fitting a :class:`~app.encoders.audio.texture.TextureNet` to training-window statistics.

Three steps, all closed-form or a few hundred small optimiser steps (seconds on a CPU):
whitening from the covariance of the statistics, the metric head with a normalised-softmax
(proxy) loss, and a seeded random rotation. No step sees validation or held-out classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from app.encoders.audio.texture import TextureNet


@dataclass(frozen=True)
class HeadTraining:
    """How the metric head is trained (defaults: the shipped sounds-texture checkpoint)."""

    steps: int = 200
    batch_size: int = 128
    lr: float = 1e-3
    weight_decay: float = 1e-3
    temperature: float = 0.05  # softmax over cosine to class proxies; low = sharper
    feature_noise: float = 0.1  # Gaussian noise on the standardised statistics, a cheap augmentation
    seed: int = 0


def fit_whitening(stats: np.ndarray, dim: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (n_in, dim) map onto the top ``dim`` principal axes, each scaled to unit variance.

    ``eps`` (a fraction of the largest eigenvalue) is added to every eigenvalue before the
    scaling: without it the smallest kept directions, mostly noise, would be amplified as much as
    the informative ones.
    """
    if len(stats) < 2:
        raise ValueError("whitening needs at least 2 training windows")
    mean = stats.mean(0)
    cov = np.cov((stats - mean).T.astype(np.float64))
    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    top = np.argsort(eigenvalues)[::-1][:dim]
    scale = np.sqrt(np.maximum(eigenvalues[top], 0.0) + eps * eigenvalues.max())
    return mean.astype(np.float32), (eigenvectors[:, top] / scale).astype(np.float32)


def random_rotation(size: int, seed: int) -> np.ndarray:
    """A (size, size) orthogonal matrix drawn uniformly (QR of a Gaussian, signs fixed)."""
    q, r = np.linalg.qr(np.random.default_rng(seed).standard_normal((size, size)))
    return (q * np.sign(np.diag(r))).astype(np.float32)


def train_head(net: TextureNet, stats: np.ndarray, labels: np.ndarray, cfg: HeadTraining) -> list[float]:
    """Train ``net.head`` in place on standardised ``stats``; returns the loss of every step."""
    classes, targets = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError("the metric head needs at least 2 training classes")
    torch.manual_seed(cfg.seed)
    head_dim = net.head[-1].out_features
    proxies = nn.Parameter(torch.randn(len(classes), head_dim))
    optimiser = torch.optim.AdamW([*net.head.parameters(), proxies], lr=cfg.lr, weight_decay=cfg.weight_decay)
    inputs = net.head_input(torch.from_numpy(stats))
    targets_t = torch.from_numpy(targets)
    generator = torch.Generator().manual_seed(cfg.seed)
    losses = []
    net.train()
    for _ in range(cfg.steps):
        batch = torch.randint(0, len(inputs), (cfg.batch_size,), generator=generator)
        x = inputs[batch] + cfg.feature_noise * torch.randn(len(batch), inputs.shape[1], generator=generator)
        embedded = nn.functional.normalize(net.head(x), dim=1)
        logits = embedded @ nn.functional.normalize(proxies, dim=1).T / cfg.temperature
        loss = nn.functional.cross_entropy(logits, targets_t[batch])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    net.eval()
    return losses


def fit_texture_net(stats: np.ndarray, labels: np.ndarray, arch: dict, whiten_eps: float, head: HeadTraining,
                    rotation_seed: int) -> tuple[TextureNet, list[float]]:
    """A TextureNet fitted to (windows, n_in) statistics with one label per window."""
    stats = np.ascontiguousarray(stats, dtype=np.float32)
    # the head's initial weights come from torch's global generator: seed it here, or they would
    # depend on whatever ran before (cross-validation folds, or nothing at all)
    torch.manual_seed(head.seed)
    net = TextureNet(**arch)
    if stats.shape[1] != net.n_in:
        raise ValueError(f"statistics have {stats.shape[1]} values, the network takes {net.n_in}")
    mean, whiten = fit_whitening(stats, net.whiten.shape[1], whiten_eps)
    with torch.no_grad():
        net.whiten_mean.copy_(torch.from_numpy(mean))
        net.whiten.copy_(torch.from_numpy(whiten))
        net.head_mean.copy_(torch.from_numpy(stats.mean(0)))
        net.head_scale.copy_(torch.from_numpy(stats.std(0) + 1e-6))
        net.rotation.copy_(torch.from_numpy(random_rotation(net.dim, rotation_seed)))
    if net.head_dim == 0:  # the whitening alone: nothing is learned from the labels
        return net.eval(), []
    losses = train_head(net, stats, labels, head)
    return net, losses
