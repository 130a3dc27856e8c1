"""Training-free views added to the speech half of a ``routed-fusion`` encoder (general-audio version 3).

Why: the trained speech branch and the Levin-style downsampled MFCC (app/encoders/audio/levin_mfcc.py, the
baseline's numerics)
make different errors on English digits by unseen speakers, so a weighted direct sum of the two
finds more than either; and the branch's float embedding has a few dominant directions (speaker,
level) that a regularised whitening damps. Neither needs training: all they hold is statistics of
unlabelled training-side speech windows and a seeded random matrix, fixed in the checkpoint, because
a service cannot standardise over the collection it searches (the baseline does that; it would make a
window's embedding depend on what else was indexed).

For one window with speech-branch float ``s`` (its trained code values ``c``) and 16 kHz audio ``x``:

- ``u = normalise((s - white_mean) @ white_map)`` when whitening is on, else ``normalise(s)``;
  ``white_map = V diag(1 / sqrt(max(lambda, eps * lambda_max)))`` from the eigen-decomposition of the
  training windows' covariance (eigenvalues floored, so weak directions are not blown up);
- ``z = (levin_mfcc(x) - mfcc_mean) / mfcc_scale`` (130 values);
- float ``[u, w * normalise(z)]`` with ``w = sqrt(mfcc_bits / speech_bits)``; code values: the trained
  ``c`` unchanged plus ``z @ mfcc_proj`` (``mfcc_proj`` a seeded Gaussian 130 x mfcc_bits: sign random
  projections, whose Hamming distance estimates the angle), which routed_fusion.fuse places in the sounds
  half of a speech window's code. With ``w^2`` equal to the ratio of bit counts, the float cosine and the
  Hamming similarity weight the two views alike.

Version 7 adds a front-end view, for a speech branch on a pretrained front-end (speech_embedding): the
front-end frames the head reads, averaged over time and centred by their training-side mean, ``m``; float part
``sqrt(frontend_bits / speech_bits) * normalise(m)``, code values ``m @ frontend_proj`` (seeded Gaussian). A head
trained on a few corpora narrows what the front-end knew about others (reports/audio/version6.md, the
leave-one-corpus-out rows); keeping the front-end's own view beside it lets a language or voice the head never
heard fall back to what the front-end knows (reports/audio/version7.md).

The whitening touches the float only: the trained bits stay the code (the signs of whitened values
were a worse code, Hamming/float 0.93; reports/audio/README.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from app.encoders.audio.levin_mfcc import MFCC_DIM, N_MELS, SAMPLE_RATE as MFCC_RATE, downsampled_mfcc, levin_mfcc_batch
from app.features.logmel import LogMel

PREFIX = "views."


class SpeechViews(torch.nn.Module):
    """The fixed statistics and projection; ``forward`` turns the speech branch's output into the speech half."""

    def __init__(self, speech_dim: int, speech_bits: int, whiten: bool, mfcc_bits: int,
                 frontend_dim: int = 0, frontend_bits: int = 0) -> None:
        super().__init__()
        for name, bits in (("mfcc_bits", mfcc_bits), ("frontend_bits", frontend_bits)):
            if bits < 0 or bits % 8:
                raise ValueError(f"{name} must be a non-negative multiple of 8, got {bits}")
        if frontend_bits and frontend_dim <= 0:
            raise ValueError("the front-end view needs the front-end's frame size (frontend_dim)")
        self.speech_dim, self.speech_bits, self.whiten, self.mfcc_bits = speech_dim, speech_bits, whiten, mfcc_bits
        self.frontend_dim, self.frontend_bits = frontend_dim if frontend_bits else 0, frontend_bits
        self.mfcc_weight = math.sqrt(mfcc_bits / speech_bits)
        self.frontend_weight = math.sqrt(frontend_bits / speech_bits)
        if whiten:
            self.register_buffer("white_mean", torch.zeros(speech_dim))
            self.register_buffer("white_map", torch.eye(speech_dim))
        if mfcc_bits:
            self.register_buffer("mfcc_mean", torch.zeros(MFCC_DIM))
            self.register_buffer("mfcc_scale", torch.ones(MFCC_DIM))
            self.register_buffer("mfcc_proj", torch.zeros(MFCC_DIM, mfcc_bits))
            self.logmel = LogMel(MFCC_RATE, n_mels=N_MELS)
        if frontend_bits:
            self.register_buffer("frontend_mean", torch.zeros(frontend_dim))
            self.register_buffer("frontend_proj", torch.zeros(frontend_dim, frontend_bits))

    @property
    def extra_dim(self) -> int:
        return (MFCC_DIM if self.mfcc_bits else 0) + self.frontend_dim

    @property
    def extra_bits(self) -> int:
        """The code bits the views add (they ride in the sounds half of a speech window's code)."""
        return self.mfcc_bits + self.frontend_bits

    def standardised_mfcc(self, waves: torch.Tensor) -> torch.Tensor | None:
        """(B, samples) 16 kHz windows -> (B, 130) ``z``, or None without the MFCC view. It needs only the
        audio, so the fused encoder runs it beside the speech BLSTM, in the shorter sounds half's thread."""
        if not self.mfcc_bits:
            return None
        return (downsampled_mfcc(waves, self.logmel) - self.mfcc_mean) / self.mfcc_scale

    def standardised_mfcc_of_power(self, power: torch.Tensor) -> torch.Tensor:
        """``standardised_mfcc`` from ``self.logmel.power(waves)``, when another frontend with the same
        framing has computed those power spectra already (the fused encoder's sound statistics)."""
        return (levin_mfcc_batch(self.logmel.from_power(power).float()) - self.mfcc_mean) / self.mfcc_scale

    def forward(self, speech: torch.Tensor, z: torch.Tensor | None,
                pooled: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(speech half float, before the router's weight; the views' code values, None without bits).

        ``pooled`` is the front-end view's input: the speech branch's front-end frames averaged over time."""
        u = (speech - self.white_mean) @ self.white_map if self.whiten else speech
        floats, codes = [torch.nn.functional.normalize(u, dim=1)], []
        if self.mfcc_bits:
            if z is None:
                raise ValueError("the MFCC view needs standardised_mfcc(waves)")
            floats.append(self.mfcc_weight * torch.nn.functional.normalize(z, dim=1))
            codes.append(z @ self.mfcc_proj)
        if self.frontend_bits:
            if pooled is None:
                raise ValueError("the front-end view needs the speech branch's pooled front-end frames")
            centred = pooled - self.frontend_mean
            floats.append(self.frontend_weight * torch.nn.functional.normalize(centred, dim=1))
            codes.append(centred @ self.frontend_proj)
        return torch.cat(floats, 1), (torch.cat(codes, 1) if codes else None)


def views_from_config(spec: dict[str, Any], speech_dim: int, speech_bits: int, frontend_dim: int = 0) -> SpeechViews:
    return SpeechViews(speech_dim, speech_bits, spec.get("whiten_eps") is not None, int(spec.get("mfcc_bits", 0)),
                       frontend_dim, int(spec.get("frontend_bits", 0)))


# -- fitting (numpy, float64), used by `recall train general-audio --views-from` ---------------------------

def fit_whitening(floats: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """(mean, map) of a regularised PCA whitening: eigenvalues below ``eps`` x the largest are raised to it."""
    x = np.asarray(floats, np.float64)
    mean = x.mean(axis=0)
    values, vectors = np.linalg.eigh(np.cov((x - mean).T))
    floor = np.maximum(values, eps * values.max())
    return mean.astype(np.float32), (vectors / np.sqrt(floor)).astype(np.float32)


def fit_standardisation(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(raw, np.float64)
    return x.mean(axis=0).astype(np.float32), (x.std(axis=0) + 1e-6).astype(np.float32)


def random_projection(n_in: int, bits: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n_in, bits)).astype(np.float32)


def fitted_views(speech_floats: np.ndarray, raw_mfcc: np.ndarray, speech_bits: int, whiten_eps: float | None,
                 mfcc_bits: int, seed: int, pooled_frames: np.ndarray | None = None, frontend_bits: int = 0) -> SpeechViews:
    """A SpeechViews whose buffers are fitted on training-side windows (no labels used)."""
    frontend_dim = pooled_frames.shape[1] if frontend_bits and pooled_frames is not None else 0
    views = SpeechViews(speech_floats.shape[1], speech_bits, whiten_eps is not None, mfcc_bits, frontend_dim, frontend_bits)
    with torch.no_grad():
        if whiten_eps is not None:
            mean, mapping = fit_whitening(speech_floats, whiten_eps)
            views.white_mean.copy_(torch.from_numpy(mean))
            views.white_map.copy_(torch.from_numpy(mapping))
        if mfcc_bits:
            mean, scale = fit_standardisation(raw_mfcc)
            views.mfcc_mean.copy_(torch.from_numpy(mean))
            views.mfcc_scale.copy_(torch.from_numpy(scale))
            views.mfcc_proj.copy_(torch.from_numpy(random_projection(MFCC_DIM, mfcc_bits, seed)))
        if frontend_bits:
            views.frontend_mean.copy_(torch.from_numpy(np.asarray(pooled_frames, np.float64).mean(axis=0).astype(np.float32)))
            # a different seed from the MFCC view's, so the two projections are independent
            views.frontend_proj.copy_(torch.from_numpy(random_projection(frontend_dim, frontend_bits, seed + 1)))
    return views
