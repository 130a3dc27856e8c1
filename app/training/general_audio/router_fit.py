"""Fit the speech/non-speech router of a ``routed-fusion`` encoder and assemble its checkpoint.

The router is a logistic regression on the sound branch's texture statistics of one window. It is
fitted on windows of labelled speech (real keyword and digit clips, synthetic words in many
languages) against windows of everyday sounds, plus generated non-speech that every deployment
meets and no data set here has enough of: digital silence, low-level noise, white and pink noise,
steady tones. Speech windows are also added with noise at 5-20 dB SNR, so speech in a noisy room
stays speech, and as short words alone in a zero-padded window, as a short query arrives. Classes are weighted to balance, so the larger speech set does not push the boundary.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.audio.audio_nets import fit_to_window
from app.encoders.checkpoint import save_checkpoint
from app.encoders.audio.routed_fusion import BRANCHES, FAMILY, Router
from app.features.windows import cut_windows


def generated_non_speech(n: int, window: int, sample_rate: int, seed: int) -> list[np.ndarray]:
    """Silence, faint and loud white/pink noise and steady tones: non-speech the real data lacks."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            wave = rng.standard_normal(window) * 10 ** rng.uniform(-5, -3)  # (near-)silence
        elif kind == 1:
            wave = rng.standard_normal(window) * 10 ** rng.uniform(-2.5, -0.7)
        elif kind == 2:  # pink noise: 1/f power via a spectral shape
            spectrum = np.fft.rfft(rng.standard_normal(window))
            spectrum /= np.sqrt(np.maximum(np.arange(len(spectrum)), 1))
            wave = np.fft.irfft(spectrum, window)
            wave *= 10 ** rng.uniform(-2, -0.7) / max(np.abs(wave).max(), 1e-9)
        else:
            t = np.arange(window) / sample_rate
            wave = 10 ** rng.uniform(-1.5, -0.5) * np.sin(2 * np.pi * rng.uniform(80, 4000) * t)
        out.append(wave.astype(np.float32))
    return out


def with_noise(waves: list[np.ndarray], seed: int, snr_db: tuple[float, float] = (5.0, 20.0)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for wave in waves:
        power = float(np.mean(wave.astype(np.float64) ** 2)) + 1e-12
        noise = rng.standard_normal(len(wave)) * np.sqrt(power / 10 ** (rng.uniform(*snr_db) / 10))
        out.append((wave + noise).astype(np.float32))
    return out


def short_in_window(waves: list[np.ndarray], sample_rate: int, window_s: float, seed: int,
                 seconds: tuple[float, float] = (0.25, 0.6)) -> list[np.ndarray]:
    """Each clip's most energetic 0.25-0.6 s alone in a window of digital zeros, at a random offset.

    A short query is zero-padded to the window (app/encoders/audio_nets.fit_to_window), so a word
    of half a second arrives with half a window of exact silence; without such examples the
    router, which also learns that silence is not speech, sent some short words to the sounds
    branch (espeak-ng "okno", "khidki", "ventana": p(speech) 0.04-0.37). Both classes get them,
    so that zero padding itself says nothing about speech: a short bark stays a sound.
    """
    from app.training.audio.augment import energetic_crop

    rng = np.random.default_rng(seed)
    window = int(round(window_s * sample_rate))
    out = []
    for wave in waves:
        word = energetic_crop(np.asarray(wave, np.float32), int(rng.uniform(*seconds) * sample_rate), None)[:window]
        placed = np.zeros(window, np.float32)
        start = int(rng.integers(0, window - len(word) + 1))
        placed[start: start + len(word)] = word
        out.append(placed)
    return out


def clip_windows(waves: list[np.ndarray], sample_rate: int, window_s: float, hop_s: float) -> list[np.ndarray]:
    window = int(round(window_s * sample_rate))
    return [fit_to_window(torch.from_numpy(np.array(w, np.float32)), window).numpy()  # a writable copy
            for wave in waves for w in cut_windows(wave, sample_rate, window_s, hop_s)[0]]


def texture_statistics(features: torch.nn.Module, windows: list[np.ndarray], chunk: int = 256) -> np.ndarray:
    with torch.inference_mode():
        return np.concatenate([features(torch.from_numpy(np.stack(windows[i: i + chunk])))[:, 0].numpy()
                               for i in range(0, len(windows), chunk)])


def fit_router(speech_stats: np.ndarray, other_stats: np.ndarray, c: float = 0.1) -> tuple[Router, dict[str, float]]:
    """Balanced logistic regression on standardised statistics; returns the router and its training accuracy."""
    from sklearn.linear_model import LogisticRegression

    x = np.concatenate([speech_stats, other_stats]).astype(np.float64)
    y = np.r_[np.ones(len(speech_stats)), np.zeros(len(other_stats))]
    mean, scale = x.mean(0), x.std(0) + 1e-6
    model = LogisticRegression(C=c, max_iter=5000, class_weight="balanced").fit((x - mean) / scale, y)
    router = Router(x.shape[1])
    with torch.no_grad():
        router.mean.copy_(torch.from_numpy(mean))
        router.scale.copy_(torch.from_numpy(scale))
        router.weight.copy_(torch.from_numpy(model.coef_[0]))
        router.bias.copy_(torch.from_numpy(model.intercept_))
        p = router(torch.from_numpy(x).float()).numpy()
    accuracy = {"speech": float((p[y == 1] >= 0.5).mean()), "non_speech": float((p[y == 0] < 0.5).mean())}
    return router, accuracy


def copy_branch(source: str | Path, target: Path) -> None:
    """A branch checkpoint copied into a fused checkpoint's sub-directory (its training state left behind, and the
    markers a resumable recipe leaves in its work folder: speech_swap.FINISHED, frontend_recipe.DONE)."""
    if Path(source).resolve() != target.resolve():
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("train_state.pt", "FINISHED", "STEP_FINISHED"))


def assemble(out: str | Path, speech_dir: str | Path, sounds_dir: str | Path, router: Router, config: dict[str, Any],
             metrics: dict[str, Any]) -> Path:
    """Write the fused checkpoint: router weights and config at the top, each branch copied into its sub-directory."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for branch, source in zip(BRANCHES, (speech_dir, sounds_dir)):
        copy_branch(source, out / branch)
    return save_checkpoint(out, router.state_dict(), {"family": FAMILY, **config}, metrics)
