"""Train the image-text block network and write a checkpoint directory.

Top-down: hyperparameters in :class:`TrainConfig`, then data (generated scenes + the training
part of the photos), text vectors embedded once, then a loop of in-batch ranking loss plus the
head's graded MSE, validated on held-out generated scenes. The photos' held-out part is never
read here beyond its file names, which are stored so the report can find them.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, Field
from tqdm import tqdm

from app.encoders.checkpoint import save_checkpoint
from app.encoders.image_text.image_text import FAMILY
from app.encoders.image_text.model import ImageTextModel, head_loss, ranking_loss, to_tensor
from app.encoders.image_text.text_features import CachedFeatures, MiniLMFeatures, TextFeatures, TfidfFeatures
from app.training.image_text.data import BatchSampler, Photo, colour_pca, load_photo, read_records, split_records
from app.training.synthesis.images import Scene, generate_scenes, render


class TrainConfig(BaseModel):
    """Everything that decides the trained weights; saved in the checkpoint config."""

    name: str = Field("image-text-minilm", description="Encoder name the registry will list.")
    text_features: Literal["minilm", "tfidf"] = "minilm"
    dim: int = Field(128, description="Embedding size = bits of the binary code.")
    width: int = Field(32, description="CNN channel width multiplier; cost grows with its square.")
    text_hidden: int = 256
    head_hidden: int = 128
    steps: int = 1500
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 5e-4  # the paper's L2 constant
    head_weight: float = Field(1.0, description="Weight of the head's MSE next to the ranking loss.")
    n_scenes: int = Field(4000, description="Generated training scenes (5 captions each).")
    n_val_scenes: int = 300
    photos_dir: str | None = Field(None, description="captions.jsonl directory of real photos; None = scenes only.")
    n_holdout: int = Field(40, description="Photos held out of training for the quality report.")
    photo_fraction: float = Field(0.25, description="Share of each batch taken from training photos.")
    pca_sigma: float = 0.1
    seed: int = 0
    threads: int = 2
    device: str = "cpu"
    cache_dir: str | None = Field("/tmp/recall-text-cache", description="Where sentence vectors are cached.")
    val_every: int = 250
    max_seconds: float | None = Field(None, description="Stop early (and save) after this much training time.")
    stop_step: int | None = Field(
        None, description="Stop after this step while keeping the learning-rate schedule of `steps`; "
        "replays a run that max_seconds cut short, step for step.")


def _text_features(config: TrainConfig, training_captions: list[str]) -> TextFeatures:
    if config.text_features == "tfidf":
        return TfidfFeatures.fit(training_captions)
    return MiniLMFeatures(device=config.device)


def _retrieval_metrics(text: np.ndarray, image: np.ndarray, head_scores: np.ndarray | None = None) -> dict[str, float]:
    """R@1/R@10 and median rank of caption i -> image i by cosine (and by the head when given)."""
    out: dict[str, float] = {}
    for label, scores in (("stage1", text @ image.T), ("rerank", head_scores)):
        if scores is None:
            continue
        ranks = (scores > np.diag(scores)[:, None]).sum(axis=1) + 1
        out.update({f"{label}_R@1": float((ranks <= 1).mean()), f"{label}_R@10": float((ranks <= 10).mean()),
                    f"{label}_median_rank": float(np.median(ranks))})
    return out


def evaluate_scenes(model: ImageTextModel, scenes: list[Scene], features: CachedFeatures, device: str) -> dict[str, float]:
    """Validation on generated scenes: first caption of each scene against all scene images."""
    from app.encoders.image_text.model import prepare

    model.eval()
    with torch.inference_mode():
        images = np.stack([prepare(render(s)) for s in scenes])
        image_emb = torch.cat([model.image_tower(to_tensor(images[i:i + 64]).to(device))
                               for i in range(0, len(images), 64)])
        text_emb = model.text_tower(torch.as_tensor(features([s.captions[0] for s in scenes]), device=device))
        n = len(scenes)
        head = model.head(image_emb.repeat(n, 1), text_emb.repeat_interleave(n, dim=0)).view(n, n)
    model.train()
    return _retrieval_metrics(text_emb.cpu().numpy(), image_emb.cpu().numpy(), head.cpu().numpy())


def train(config: TrainConfig, out_dir: str | Path | None = None, progress: bool = True) -> tuple[ImageTextModel, dict[str, Any], dict[str, Any]]:
    """Train; returns (model, checkpoint config, metrics) and writes a checkpoint when ``out_dir`` is set."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads)
    rng = np.random.default_rng(config.seed)
    started = time.time()

    scenes = generate_scenes(config.n_scenes, seed=config.seed)
    val_scenes = generate_scenes(config.n_val_scenes, seed=config.seed + 10_000)
    photos: list[Photo] = []
    held_out: list[str] = []
    if config.photos_dir:
        train_records, held_records = split_records(read_records(config.photos_dir), config.n_holdout, config.seed)
        photos = [load_photo(config.photos_dir, r) for r in train_records]
        held_out = [r["file"] for r in held_records]

    captions = sorted({c for s in scenes for c in s.captions} | {c for p in photos for c in p.captions})
    base_features = _text_features(config, captions)
    features = CachedFeatures(base_features, config.cache_dir)
    features(captions + [s.captions[0] for s in val_scenes])  # embed once, up front

    eigen = colour_pca([render(s) for s in scenes[:200]] + [p.pixels for p in photos], seed=config.seed)
    sampler = BatchSampler(scenes, photos, config.photo_fraction, eigen, augment=True, pca_sigma=config.pca_sigma)

    arch = {"text_dim": base_features.dim, "dim": config.dim, "width": config.width,
            "text_hidden": config.text_hidden, "head_hidden": config.head_hidden}
    model = ImageTextModel.from_config({"architecture": arch}).to(config.device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    warmup = max(1, config.steps // 20)

    def lr_at(step: int) -> float:  # linear warm-up, then cosine decay to 5% of the peak
        if step < warmup:
            return config.lr * (step + 1) / warmup
        progress_frac = (step - warmup) / max(1, config.steps - warmup)
        return config.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress_frac)))

    history: list[dict[str, float]] = []
    bar = tqdm(range(config.steps), desc="train image-text", disable=not progress)
    for step in bar:
        for group in optimiser.param_groups:
            group["lr"] = lr_at(step)
        batch = sampler.sample(config.batch_size, rng)
        pixels = to_tensor(batch.images).to(config.device)
        text_vectors = torch.as_tensor(features(batch.captions), device=config.device)
        labels = torch.as_tensor(batch.labels, device=config.device)
        image_emb = model.image_tower(pixels)
        text_emb = model.text_tower(text_vectors)
        rank = ranking_loss(image_emb, text_emb, model.logit_scale, labels)
        head = head_loss(model.head, image_emb, text_emb, labels)
        loss = rank + config.head_weight * head
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        bar.set_postfix(rank=f"{rank.item():.3f}", head=f"{head.item():.4f}")
        if (step + 1) % config.val_every == 0 or step + 1 == config.steps:
            val = evaluate_scenes(model, val_scenes, features, config.device)
            history.append({"step": step + 1, "rank_loss": rank.item(), "head_loss": head.item(), **val})
            bar.write(f"step {step + 1}: " + ", ".join(f"{k}={v:.3f}" for k, v in val.items()))
        out_of_time = config.max_seconds is not None and time.time() - started > config.max_seconds
        if out_of_time or (config.stop_step is not None and step + 1 >= config.stop_step and step + 1 < config.steps):
            val = evaluate_scenes(model, val_scenes, features, config.device)
            history.append({"step": step + 1, "rank_loss": rank.item(), "head_loss": head.item(), **val})
            reason = f"time budget of {config.max_seconds} s spent" if out_of_time else "stop_step reached"
            bar.write(f"stopped at step {step + 1} of {config.steps}: {reason}")
            break

    model = model.cpu().eval()
    checkpoint_config = {
        "family": FAMILY,
        "modality": "image",
        "name": config.name,
        "bits": config.dim,
        "architecture": arch,
        "text_features": base_features.config(),
        "train": config.model_dump(),
        "held_out_files": held_out,
    }
    metrics = {"validation_scenes": history[-1] if history else {}, "history": history,
               "train_seconds": round(time.time() - started, 1), "steps_done": history[-1]["step"] if history else 0,
               "n_train_photos": len(photos),
               "n_scenes": len(scenes)}
    if out_dir is not None:
        save_checkpoint(out_dir, model.state_dict(), checkpoint_config, metrics)
    return model, checkpoint_config, metrics
