"""Fit general-audio's training-free speech views (app/encoders/audio/speech_views.py) on an existing
``routed-fusion`` checkpoint and write a new checkpoint with the same branches and router.

    recall train general-audio --data ../shared/data --views-from app/assets/models/general-audio@2 \\
        --whiten-eps 0.3 --mfcc-bits 64 --out app/assets/models/general-audio --version 3
    recall train general-audio --data ../shared/data --views-from app/assets/models/general-audio@6 \\
        --frontend-bits 256 --out app/assets/models/general-audio --version 7

The statistics come from unlabelled training-side speech windows only: a seeded sample of 600 Arabic
Speech Commands clips by the speakers the speech branch trained on (its held-out and validation speakers
left out) and the FSDD clips it trained on (george and lucas, digits not held out). No label is read.
A source trained ``--without`` a corpus (leave-one-corpus-out runs) has its views fitted without that
corpus too, so the held-out corpus stays unheard by every step, statistics included.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.audio.audio_nets import fit_to_window
from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from app.encoders.audio.levin_mfcc import MFCC_DIM, N_MELS, downsampled_mfcc
from app.encoders.audio.speech_views import PREFIX, fitted_views
from app.features.logmel import LogMel
from app.training.general_audio.data import left_out
from app.training.general_audio.router_fit import copy_branch

ASC_SAMPLE = 600
CHUNK = 64


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def fit_paths(data: Path, speech_config: dict[str, Any], seed: int, without: str | None = None) -> list[Path]:
    """The training-side clips the views are fitted on (see the module docstring); ``without`` names the
    corpora the source checkpoint was trained without, left out here as well."""
    from app.training.general_audio import data as recipe

    skipped = left_out(without)
    split = speech_config.get("split", {})
    unheard = set(recipe.ASC_HOLDOUT_SPEAKERS) | set(split.get("val", [])) | set(split.get("holdout", []))
    asc = [] if "asc" in skipped else [r for r in _rows(data / "asc" / "asc.csv") if r["speaker"] not in unheard]
    chosen = sorted(np.random.default_rng(seed).choice(len(asc), size=min(ASC_SAMPLE, len(asc)), replace=False))
    fsdd = [] if "fsdd" in skipped else [
        r for r in _rows(data / "fsdd" / "fsdd.csv")
        if r["speaker"] not in recipe.FSDD_HOLDOUT_SPEAKERS and r["digit"] not in recipe.FSDD_HOLDOUT_WORDS]
    return [data / "asc" / asc[i]["file"] for i in chosen] + [data / "fsdd" / r["file"] for r in fsdd]


def window_batches(clips: list[np.ndarray], rate: int, window_s: float, hop_s: float, window: int):
    """The service's windows of each clip (1 s every 0.5 s), centred in ``window`` samples, in batches."""
    from app.features.windows import cut_windows

    flat = [w for clip in clips for w in cut_windows(clip, rate, window_s, hop_s)[0]]
    for start in range(0, len(flat), CHUNK):
        yield np.stack([fit_to_window(torch.from_numpy(np.require(w, np.float32, ["W"])), window).numpy()
                        for w in flat[start: start + CHUNK]])


def fit_views_checkpoint(data: Path, source: Path, out: Path, whiten_eps: float | None, mfcc_bits: int, seed: int,
                         config_update: dict[str, Any], frontend_bits: int = 0) -> Path:
    from app.encoders.registry import load_checkpoint_dir
    from app.training.audio.data import Record, load_waves

    source, out = Path(source), Path(out)
    if source.resolve() == out.resolve():
        raise SystemExit("--views-from and --out must differ (the source checkpoint is read while the new one is written)")
    stored = read_config(source)
    if stored.get("family") != "routed-fusion" or stored.get("speech_views") is not None:
        raise CheckpointError(f"{source}: --views-from needs a routed-fusion checkpoint without speech views")
    encoder = load_checkpoint_dir(source)
    if frontend_bits and getattr(encoder.speech.features, "kind", None) != "speech-embedding":
        raise SystemExit(f"--frontend-bits: {source}'s speech branch is not on a pretrained front-end")
    if mfcc_bits + frontend_bits > encoder.sounds.bits:
        raise SystemExit(f"--mfcc-bits + --frontend-bits ({mfcc_bits + frontend_bits}) exceed the {encoder.sounds.bits}-bit sounds half")
    without = stored.get("without")
    paths = fit_paths(data, read_config(source / "speech"), seed, without)
    if not paths:
        raise SystemExit("--views-from: no training-side speech clips left to fit the views on")
    clips = load_waves([Record(str(p), "") for p in paths], encoder.sample_rate, cache_dir="/tmp/recall-audio-cache")
    logmel = LogMel(encoder.sample_rate, n_mels=N_MELS)
    floats, raw, pooled = [], [], []
    with torch.inference_mode():
        for waves in window_batches(clips, encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s,
                                    encoder.window):
            speech_waves = encoder._speech_waves(waves)
            floats.append(encoder.speech.embed_tensor(speech_waves)[0].float().cpu().numpy())
            if mfcc_bits:
                raw.append(downsampled_mfcc(torch.from_numpy(waves), logmel).numpy())
            if frontend_bits:
                pooled.append(encoder.speech.features(speech_waves).mean(dim=1).float().cpu().numpy())
    floats_arr = np.concatenate(floats)
    raw_arr = np.concatenate(raw) if raw else np.zeros((len(floats_arr), MFCC_DIM), np.float32)
    views = fitted_views(floats_arr, raw_arr, encoder.speech.bits, whiten_eps, mfcc_bits, seed,
                         np.concatenate(pooled) if pooled else None, frontend_bits)

    out.mkdir(parents=True, exist_ok=True)
    for branch in ("speech", "sounds"):
        copy_branch(source / branch, out / branch)
    if (source / "DATA.md").is_file():  # the branches' data card, and what the views were fitted on
        card = (source / "DATA.md").read_text().rstrip("\n")
        (out / "DATA.md").write_text(
            f"{card}\n\n`{config_update.get('name', out.name)}` version {config_update.get('version')} is the checkpoint above "
            f"plus training-free speech views fitted on {len(floats_arr)} unlabelled training-side windows "
            f"(no label read, nothing trained): `{config_update.get('reproduce', {}).get('train', '')}`.\n")
    state, _ = load_checkpoint(source)
    state.update({PREFIX + k: v for k, v in views.state_dict().items()})
    spec = {"whiten_eps": whiten_eps, "mfcc_bits": mfcc_bits, "mfcc_weight": views.mfcc_weight, "seed": seed,
            **({"frontend_bits": frontend_bits, "frontend_weight": views.frontend_weight} if frontend_bits else {}),
            "fitted_on": f"{len(floats_arr)} unlabelled training-side windows ({len(paths)} clips: "
                         + ", ".join(part for corpus, part in (("asc", "ASC training speakers"),
                                                                ("fsdd", "FSDD george/lucas training digits"))
                                     if corpus not in left_out(without)) + ")",
            "from": {"name": stored.get("name"), "version": stored.get("version")}}
    config = {**stored, **config_update, "speech_views": spec}
    metrics = {"views_windows": len(floats_arr), "views_clips": len(paths)}
    return save_checkpoint(out, state, config, metrics)
