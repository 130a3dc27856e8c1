"""Train a ``siamese-mlp`` or ``attn-hash`` audio encoder and write its checkpoint directory.

Top-down: the config (hyperparameters up front), data and splits, the network built by the same
code the service loads it with, then epochs of augmented batches, validation MAP on a speaker- or
class-disjoint split after each, early stopping, and a resumable state file.
"""

from __future__ import annotations

import dataclasses
import json
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from app.encoders.audio import attn_hash

from app.encoders.audio import siamese
from app.encoders.audio._trained_audio import build_parts
from app.encoders.checkpoint import save_checkpoint
from app.training.audio.data import Record, load_waves, read_manifest, read_pack, split_records, with_extra_training
from app.training.audio.augment import AugmentConfig, eval_window, training_window
from app.training.audio.feature_bank import build_bank, draw
from app.training.audio.spec_augment import MaskConfig, mask_features
from app.training.losses import HashLossWeights, contrastive_loss, hashing_objective
from app.training.retrieval import cosine_scores, hamming_scores, retrieval_metrics
from app.training.audio.samplers import LabelIndex, pair_batch, triplet_batch

BUILDERS = {"siamese-mlp": siamese.build_net, "attn-hash": attn_hash.build_net}


@dataclass
class TrainConfig:
    """Everything a run depends on; stored in the checkpoint so the run can be repeated.

    A dataclass rather than a pydantic model so that training also runs on machines with only
    torch and numpy (the GPU image has no pydantic); ``__post_init__`` does the validation.
    """

    manifest: str
    model: Literal["siamese-mlp", "attn-hash"]
    out: str
    name: str
    bits: int = 256
    split_by: Literal["speaker", "label"] = "speaker"
    holdout: list[str] = field(default_factory=list)  # speakers or labels kept for the report
    val_groups: int = 2
    sample_rate: int = 16000
    window_s: float = 1.0
    hop_s: float = 0.25
    features: dict[str, Any] | None = None  # None: the family's paper frontend
    hidden: int = 128  # attn-hash BLSTM units per direction
    layers: int = 2
    heads: int = 5
    d_a: int = 64
    output_relu: bool = True  # siamese-mlp: paper 000's ReLU on the 128-d output layer
    hash_norm: bool = True  # see AttnHashNet: keeps codes from collapsing under the quantisation loss
    dropout: float | None = None  # None: 0.3 (paper 000) or 0.4 (paper 004)
    epochs: int = 30
    steps_per_epoch: int = 100
    batch_size: int = 64
    lr: float = 1e-3
    patience: int = 6
    lr_patience: int = 0  # >0: halve the learning rate after this many epochs without a better val MAP
    # "best": keep the epoch with the best validation MAP and stop after ``patience`` epochs without one;
    # "last": run every epoch and keep the last, for when validation covers only part of what is
    # learnt (a fine-tune on new words whose validation speaker knows only the old ones)
    keep: str = "best"
    seed: int = 0
    # which speakers (or labels) validate: drawn with this seed, or with ``seed`` when None. Fixed apart from the
    # seed, heads trained with several seeds are validated on the same speakers, so their validation MAPs compare
    split_seed: int | None = None
    alpha: float = 0.01
    beta: float = 1.0
    gamma: float = 0.0005  # paper 004: 0.01 (HashLossWeights' default); collapsed all codes on our data
    quant_warmup: int = 10  # epochs over which gamma ramps up from 0 (see step_loss)
    margin: float = 0.5  # triplet theta (cosine) or contrastive m (euclidean)
    pairs: Literal["balanced", "unbalanced"] = "balanced"
    mining: Literal["random", "semihard", "hard"] = "semihard"
    augment: bool = True
    spec_augment: bool = False  # attn-hash: mask random mel bands and frames (app/training/audio/spec_augment.py)
    cache_dir: str | None = "/tmp/recall-audio-cache"
    threads: int = 2
    device: str = "cpu"
    description: str = ""
    command: str = ""
    extra_manifests: list[str] = field(default_factory=list)  # training-only extra data (e.g. synth_speech)
    # a frozen pretrained front-end (features with no trainable weights): embed this many augmented
    # windows of each training clip once, and draw each batch's features from them (0: every step anew)
    bank_copies: int = 0

    def __post_init__(self) -> None:
        if not (8 <= self.bits <= 2048 and self.bits % 8 == 0):
            raise ValueError(f"bits must be a multiple of 8 between 8 and 2048, got {self.bits}")
        if self.model not in BUILDERS:
            raise ValueError(f"model must be one of {sorted(BUILDERS)}, got {self.model!r}")
        if self.split_by not in ("speaker", "label"):
            raise ValueError(f"split_by must be 'speaker' or 'label', got {self.split_by!r}")
        if self.window_s <= 0 or self.hop_s <= 0:
            raise ValueError("window and hop must be positive")

    def model_dump(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_features(model: str, sample_rate: int) -> dict[str, Any]:
    if model == "siamese-mlp":  # paper 000: 1024-point FFT, 64 ms window, 32 ms hop, 79 log bands
        return {"kind": "logspec", "sample_rate": sample_rate, "n_fft": 1024, "win_ms": 64.0, "hop_ms": 32.0, "n_bands": 79}
    return {"kind": "logmel", "sample_rate": sample_rate, "win_ms": 25.0, "hop_ms": 10.0, "n_mels": 40}


def model_config(cfg: TrainConfig) -> dict[str, Any]:
    """The checkpoint config (without the input size, which the frontend decides)."""
    features = cfg.features or default_features(cfg.model, cfg.sample_rate)
    if cfg.model == "siamese-mlp":
        arch: dict[str, Any] = {"hidden": [512, 256, cfg.bits], "dropout": 0.3 if cfg.dropout is None else cfg.dropout,
                                "output_relu": cfg.output_relu}
    else:
        arch = {"hidden": cfg.hidden, "layers": cfg.layers, "dropout": 0.4 if cfg.dropout is None else cfg.dropout,
                "d_a": cfg.d_a, "heads": cfg.heads, "bits": cfg.bits,
                "hash_norm": cfg.hash_norm, "hash_scale": 3.0}
    return {
        "family": cfg.model, "modality": "audio", "name": cfg.name, "sample_rate": cfg.sample_rate,
        "window_s": cfg.window_s, "hop_s": cfg.hop_s, "features": features, "arch": arch, "bits": cfg.bits,
        "description": cfg.description, "training": cfg.model_dump(),
    }


def build_model(config: dict[str, Any]) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Frontend and network for a config, measuring the network input size from the frontend."""
    window = int(round(config["window_s"] * config["sample_rate"]))
    from app.features.spectrogram import build_features

    with torch.no_grad():
        frames, bins = build_features(config["features"])(torch.zeros(1, window)).shape[1:]
    config["arch"]["n_in"] = frames * bins if config["family"] == "siamese-mlp" else bins
    return build_parts(config, config["family"], BUILDERS[config["family"]])


def _seed_everything(seed: int) -> np.random.Generator:
    random.seed(seed)
    torch.manual_seed(seed)
    return np.random.default_rng(seed)


def _set_input_stats(net: torch.nn.Module, features: torch.nn.Module, windows: np.ndarray, per_dim: bool) -> None:
    """Per-bin (attn-hash) or per-input (siamese) mean and std of the training windows' features."""
    with torch.no_grad():
        feats = torch.cat([features(torch.from_numpy(windows[i : i + 256])) for i in range(0, len(windows), 256)])
    flat = feats.reshape(len(feats), -1) if per_dim else feats.reshape(-1, feats.shape[-1])
    net.input_mean.copy_(flat.mean(0))
    net.input_std.copy_(flat.std(0).clamp_min(1e-3))


def _describe_extra(path: str, records: list[Record]) -> dict[str, Any]:
    """What an extra manifest added, and how it was made when synth_speech wrote it."""
    described: dict[str, Any] = {"path": path, "clips": len(records), "labels": len({r.label for r in records}),
                                 "speakers": len({r.speaker for r in records})}
    made_by = (Path(path) if Path(path).is_dir() else Path(path).parent) / "synth.json"
    if made_by.is_file():
        described["synth_command"] = json.loads(made_by.read_text()).get("command", "")
    return described


class Trainer:
    """Holds the data, the model and the optimiser of one run; :meth:`run` trains it."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        torch.set_num_threads(cfg.threads)
        self.rng = _seed_everything(cfg.seed)
        records, waves_of = self._source(cfg.manifest)
        split_seed = cfg.seed if cfg.split_seed is None else cfg.split_seed
        splits = split_records(records, cfg.split_by, cfg.holdout, cfg.val_groups, split_seed,
                               allow_absent=cfg.manifest.endswith(".npz"))
        self.train_waves = waves_of(splits.train)
        self.val_waves = waves_of(splits.val)
        # extra data joins the training split only; validation and test stay the main manifest's
        extra: list[Record] = []
        self.extra_data: list[dict[str, Any]] = []
        for path in cfg.extra_manifests:
            extra_records, extra_waves_of = self._source(path)
            extra += extra_records
            self.train_waves += extra_waves_of(extra_records)
            self.extra_data.append(_describe_extra(path, extra_records))
        self.splits = with_extra_training(splits, extra, cfg.split_by, cfg.holdout)
        # labels only extra data has may have a single clip: negatives only (see LabelIndex)
        extra_only = {r.label for r in extra} - {r.label for r in splits.train}
        self.index = LabelIndex([r.label for r in self.splits.train], [r.speaker for r in self.splits.train],
                                negatives_only=extra_only)
        if extra:
            print(f"extra training data: {len(extra)} clips, {len({r.label for r in extra})} labels "
                  f"({len(extra_only)} not in the manifest; {len(self.index.singletons)} with one clip, used as negatives only)")
        self.config = model_config(cfg)
        self.features, self.net = build_model(self.config)
        self.window = int(round(cfg.window_s * cfg.sample_rate))
        sample = self.rng.choice(len(self.train_waves), size=min(2000, len(self.train_waves)), replace=False)
        _set_input_stats(self.net, self.features, self._eval_windows([self.train_waves[i] for i in sample]),
                         per_dim=cfg.model == "siamese-mlp")
        self.features.to(cfg.device)
        self.net.to(cfg.device)
        self.optimiser = torch.optim.Adam(self.net.parameters(), lr=cfg.lr)
        self.scheduler = (torch.optim.lr_scheduler.ReduceLROnPlateau(self.optimiser, mode="max", factor=0.5, patience=cfg.lr_patience)
                          if cfg.lr_patience > 0 else None)
        self.weights = HashLossWeights(cfg.alpha, cfg.beta, cfg.gamma, cfg.margin)
        self.augment = AugmentConfig() if cfg.augment else AugmentConfig(0.0, 0.0, 0.0, (0, 0), (0, 0), 0.0, (1, 1))
        # a frozen front-end's frames, computed once (app/training/audio/feature_bank.py)
        self.bank = (build_bank(self.features, self._train_windows, len(self.train_waves), cfg.bank_copies)
                     if cfg.bank_copies > 0 else None)
        self.out = Path(cfg.out)
        self.state_path = self.out / "train_state.pt"
        self.epoch, self.best, self.bad_epochs, self.history = 0, -1.0, 0, []

    def _source(self, manifest: str) -> tuple[list[Record], Any]:
        """Records of a manifest or pack, and a function giving their waveforms."""
        cfg = self.cfg
        if manifest.endswith(".npz"):  # a pack: records and audio in one file (see audio_data)
            records, packed = read_pack(manifest, cfg.sample_rate)
            lookup = dict(zip((r.path for r in records), packed))
            return records, lambda recs: [lookup[r.path] for r in recs]
        return read_manifest(manifest), lambda recs: load_waves(recs, cfg.sample_rate, cfg.cache_dir)

    # ---- batches -------------------------------------------------------------------------
    def _eval_windows(self, waves: list[np.ndarray]) -> np.ndarray:
        return np.stack([eval_window(w, self.window) for w in waves])

    def _train_windows(self, indices: np.ndarray) -> torch.Tensor:
        context = lambda: self.train_waves[int(self.rng.integers(len(self.train_waves)))]  # noqa: E731
        windows = [training_window(self.train_waves[i], self.window, self.cfg.sample_rate, self.rng, self.augment, context)
                   for i in indices]
        return torch.from_numpy(np.stack(windows)).to(self.cfg.device)

    def _train_features(self, indices: np.ndarray) -> torch.Tensor:
        if self.bank is None:
            return self.features(self._train_windows(indices))
        return draw(self.bank, indices, self.rng).to(self.cfg.device)

    def step_loss(self) -> dict[str, torch.Tensor]:
        """Loss terms of one freshly sampled batch (the network is in train mode)."""
        cfg = self.cfg
        if cfg.model == "siamese-mlp":
            rows = pair_batch(self.index, cfg.batch_size, self.rng, balanced=cfg.pairs == "balanced")
            emb = self.net(self.features(self._train_windows(rows[:, :2].T.ravel())))
            first, second = emb[: len(rows)], emb[len(rows) :]
            same = torch.from_numpy(rows[:, 2]).to(emb.device)
            return {"total": contrastive_loss(first, second, same, cfg.margin)}
        # With gamma at full weight from the first step, the quantisation term (a sum over all bits)
        # outweighs the triplet term ~15:1 and drives every unit to the same saturated sign for
        # every input: all codes collapse to one. Ramping gamma up after the triplet term has
        # spread the embeddings avoids that; the paper's coefficients hold after the ramp.
        ramp = min(1.0, self.epoch / cfg.quant_warmup) if cfg.quant_warmup > 0 else 1.0
        self.weights = HashLossWeights(cfg.alpha, cfg.beta, cfg.gamma * ramp, cfg.margin)
        rows = triplet_batch(self.index, cfg.batch_size, self.rng)
        feats = self._train_features(rows.T.ravel())
        if cfg.spec_augment:
            feats = mask_features(feats, self.net.input_mean, self.rng, MaskConfig())
        values, attention = self.net(feats)
        b = len(rows)
        thirds = [torch.arange(i * b, (i + 1) * b, device=values.device) for i in range(3)]
        if cfg.mining in ("hard", "semihard"):
            thirds[2] = self._hardest_negatives(values, rows)
        return hashing_objective(tuple(values[t] for t in thirds), tuple(attention[t] for t in thirds), self.weights)  # type: ignore[arg-type]

    def _hardest_negatives(self, values: torch.Tensor, rows: np.ndarray) -> torch.Tensor:
        """Batch-mined negatives (their rows in the batch): for each anchor, a clip of another label close in cosine.

        "hard" takes the closest one (collapses easily from a random start); "semihard" takes the
        closest one that is still farther than the positive (FaceNet), keeping the sampled random
        negative where there is none.
        """
        labels = self.index.labels[rows.T.ravel()]
        b = len(rows)
        normed = torch.nn.functional.normalize(values, dim=1)
        sims = normed[:b] @ normed.T  # (b, 3b) anchor similarities
        candidates = torch.from_numpy(labels[None, :] != labels[:b, None]).to(sims.device)
        if self.cfg.mining == "semihard":
            positive_sim = (normed[:b] * normed[b : 2 * b]).sum(dim=1, keepdim=True)
            candidates &= sims < positive_sim
        masked = sims.masked_fill(~candidates, -3.0)
        pick = masked.argmax(dim=1)
        fallback = torch.arange(2 * b, 3 * b, device=sims.device)  # the sampled random negative
        return torch.where(candidates.any(dim=1), pick, fallback)  # rows of the batch

    # ---- evaluation ----------------------------------------------------------------------
    def embed(self, waves: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """Float embeddings and code values of clips' evaluation windows (eval mode, no grad)."""
        self.net.eval()
        windows = self._eval_windows(waves)
        floats, values = [], []
        with torch.inference_mode():
            for i in range(0, len(windows), 128):
                f, v = self.net.embed(self.features(torch.from_numpy(windows[i : i + 128]).to(self.cfg.device)))
                floats.append(f.float().cpu().numpy())
                values.append(v.float().cpu().numpy())
        return np.concatenate(floats), np.concatenate(values)

    def validate(self) -> dict[str, float]:
        floats, values = self.embed(self.val_waves)
        labels = np.array([r.label for r in self.splits.val])
        cos = retrieval_metrics(cosine_scores(floats), labels)
        ham = retrieval_metrics(hamming_scores(values), labels)
        return {"val_map": cos["map"], "val_map_hamming": ham["map"], "val_precision@1": cos["precision@1"]}

    def _finalise_codes(self) -> None:
        """Siamese codes: the sign after subtracting the mean training embedding (stored as a buffer)."""
        if self.cfg.model == "siamese-mlp":
            self.net.code_mean.zero_()
            floats, _ = self.embed(self.train_waves[:: max(1, len(self.train_waves) // 2000)])
            self.net.code_mean.copy_(torch.from_numpy(floats.mean(0)))

    # ---- persistence ---------------------------------------------------------------------
    def save_state(self) -> None:
        state = {"net": self.net.state_dict(), "optimiser": self.optimiser.state_dict(), "epoch": self.epoch,
                 "scheduler": self.scheduler.state_dict() if self.scheduler else None,
                 "best": self.best, "bad_epochs": self.bad_epochs, "history": self.history,
                 "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state()}
        tmp = self.state_path.with_suffix(".tmp")
        torch.save(state, tmp)
        tmp.replace(self.state_path)

    def load_state(self) -> bool:
        if not self.state_path.is_file():
            return False
        state = torch.load(self.state_path, weights_only=False)
        self.net.load_state_dict(state["net"])
        self.optimiser.load_state_dict(state["optimiser"])
        if self.scheduler and state.get("scheduler"):
            self.scheduler.load_state_dict(state["scheduler"])
        self.epoch, self.best, self.bad_epochs = state["epoch"], state["best"], state["bad_epochs"]
        self.history = state["history"]
        self.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        return True

    def save_checkpoint(self, metrics: dict[str, Any]) -> None:
        self._finalise_codes()
        provenance = {"extra_data": self.extra_data}
        config = {**self.config, **provenance,
                  "split": {"by": self.cfg.split_by, "holdout": self.cfg.holdout,
                            "val": sorted({getattr(r, self.cfg.split_by) for r in self.splits.val})}}
        save_checkpoint(self.out, self.net.state_dict(), config, {**metrics, **provenance})

    # ---- the loop ------------------------------------------------------------------------
    def run(self, resume: bool = False) -> dict[str, Any]:
        """Train until ``epochs`` or ``patience`` epochs without a better validation MAP."""
        from tqdm import tqdm

        self.out.mkdir(parents=True, exist_ok=True)
        if resume and self.load_state():
            print(f"resumed after epoch {self.epoch} (best val MAP {self.best:.4f})")
        cfg = self.cfg
        while self.epoch < cfg.epochs and (cfg.keep == "last" or self.bad_epochs < cfg.patience):
            self.net.train()
            started, sums = time.time(), {}
            bar = tqdm(range(cfg.steps_per_epoch), desc=f"epoch {self.epoch + 1}/{cfg.epochs}", unit="step", leave=False)
            for _ in bar:
                terms = self.step_loss()
                self.optimiser.zero_grad()
                terms["total"].backward()
                self.optimiser.step()
                for key, value in terms.items():
                    sums[key] = sums.get(key, 0.0) + float(value.detach())
                bar.set_postfix(loss=f"{float(terms['total'].detach()):.4f}")
            self.epoch += 1
            record = {"epoch": self.epoch, "seconds": round(time.time() - started, 1),
                      **{f"loss_{k}": v / cfg.steps_per_epoch for k, v in sums.items()}, **self.validate()}
            record["lr"] = self.optimiser.param_groups[0]["lr"]
            self.history.append(record)
            if self.scheduler:
                self.scheduler.step(record["val_map"])
            improved = record["val_map"] > self.best
            self.best, self.bad_epochs = (record["val_map"], 0) if improved else (self.best, self.bad_epochs + 1)
            print(json.dumps(record), flush=True)
            if improved or cfg.keep == "last":
                self.save_checkpoint({"best_epoch": self.epoch, "keep": cfg.keep, **record, "history": self.history})
            self.save_state()
        metrics = json.loads((self.out / "metrics.json").read_text())
        metrics["history"] = self.history
        (self.out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        return metrics
