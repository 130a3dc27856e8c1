"""`recall train audio`: train a siamese-mlp, attn-hash or texture-mlp encoder from a manifest.

Example (the default speech checkpoint, see reports/audio/README.md)::

    recall train audio --manifest ../shared/data/asc/asc.csv --model attn-hash --bits 256 \\
        --out app/assets/models/speech-attn-hash --split-by speaker --holdout 00000001,...
"""

from __future__ import annotations

import argparse
import shlex
import sys


def _csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def add_parser(kinds: argparse._SubParsersAction) -> None:
    p = kinds.add_parser("audio", help="train an audio encoder (siamese-mlp of paper 000, attn-hash of paper 004, "
                                       "texture-mlp for general sounds)")
    p.add_argument("--manifest", required=True, help="CSV path,label[,speaker][,start,end] or a folder per label")
    p.add_argument("--model", required=True, choices=["siamese-mlp", "attn-hash", "texture-mlp"])
    p.add_argument("--bits", type=int, default=256, help="code bits (attn-hash hash layer; siamese output width)")
    p.add_argument("--out", required=True, help="checkpoint directory to write")
    p.add_argument("--name", help="encoder name in the registry (default: the out folder's name)")
    p.add_argument("--split-by", choices=["speaker", "label"], default="speaker")
    p.add_argument("--holdout", type=_csv_list, default=[], help="comma-separated speakers/labels never trained on")
    p.add_argument("--val-groups", type=int, default=2, help="speakers/labels drawn for per-epoch validation")
    p.add_argument("--sample-rate", type=int, default=16000)
    p.add_argument("--window", type=float, default=1.0, help="analysis window in seconds")
    p.add_argument("--hop", type=float, default=0.25, help="default hop over long recordings in seconds")
    p.add_argument("--frontend", metavar="speech-embedding[:PAD_S]",
                   help="attn-hash: train on a frozen pretrained front-end's frames instead of log-mel: Google's "
                        "speech_embedding (app/features/pretrained), the window widened by PAD_S s of silence")
    p.add_argument("--bank-copies", type=int, default=0,
                   help="with a frozen --frontend: embed this many augmented windows per training clip once and "
                        "train on them (0: run the front-end at every step)")
    p.add_argument("--hidden", type=int, default=128, help="attn-hash BLSTM units per direction")
    p.add_argument("--heads", type=int, default=5)
    p.add_argument("--d-a", type=int, default=64)
    p.add_argument("--dropout", type=float)
    p.add_argument("--no-output-relu", dest="output_relu", action="store_false",
                   help="siamese-mlp without the paper's ReLU on the output layer (dead output units collapse embeddings)")
    p.add_argument("--no-hash-norm", dest="hash_norm", action="store_false",
                   help="attn-hash without batch norm before tanh (the paper's plain layer; collapsed on our data)")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--steps", type=int, default=100, help="batches per epoch")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--patience", type=int, default=6, help="epochs without better validation MAP before stopping")
    p.add_argument("--keep", choices=("best", "last"), default="best",
                   help="best: the epoch with the best validation MAP (early stopping after --patience); "
                        "last: every epoch runs and the last is kept")
    p.add_argument("--lr-patience", type=int, default=0, help="halve the learning rate after this many epochs without progress (0: never)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--split-seed", type=int, default=None,
                   help="seed of the validation draw (default: --seed); fixed, heads of several seeds validate alike")
    p.add_argument("--alpha", type=float, default=0.01, help="penalisation weight (paper 004)")
    p.add_argument("--beta", type=float, default=1.0, help="triplet weight (paper 004)")
    p.add_argument("--gamma", type=float, default=0.0005,
                   help="quantisation weight; paper 004 uses 0.01, which saturated every code to one value on our data")
    p.add_argument("--quant-warmup", type=int, default=10, help="epochs over which gamma ramps up from 0")
    p.add_argument("--margin", type=float, default=0.5, help="triplet theta (cosine) or contrastive margin")
    p.add_argument("--pairs", choices=["balanced", "unbalanced"], default="balanced", help="siamese pair sampling")
    p.add_argument("--mining", choices=["random", "semihard", "hard"], default="semihard",
                   help="attn-hash negatives: random (paper 004; learnt far slower here) or mined in the batch")
    p.add_argument("--no-augment", dest="augment", action="store_false")
    p.add_argument("--spec-augment", action="store_true",
                   help="attn-hash: also mask random mel bands and frames (SpecAugment) in training")
    p.add_argument("--cache-dir", default="/tmp/recall-audio-cache", help="decoded-audio cache ('' disables)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--description", default="")
    p.add_argument("--resume", action="store_true", help="continue from OUT/train_state.pt")
    p.add_argument("--extra-manifest", dest="extra_manifests", action="append", default=[], metavar="PATH",
                   help="synthetic or other extra data (a manifest or pack, repeatable), e.g. from "
                        "`python -m app.training.synthesis.speech`: added to the TRAINING split only, never to "
                        "validation or the holdout; its speakers/labels must not be validation or held-out ones. "
                        "Labels found only here with a single clip are used as negatives only")
    t = p.add_argument_group("texture-mlp (general sounds; --bits is --whiten-dim + --head-dim, split is by label)")
    t.add_argument("--train-hop", type=float, default=0.25, help="hop of the training windows in seconds")
    t.add_argument("--pcen", action=argparse.BooleanOptionalAction, default=True,
                   help="statistics of PCEN frames next to the log-mel ones (--no-pcen: log-mel only)")
    t.add_argument("--augment-copies", type=int, default=0,
                   help="augmented copies of each training clip (speed 0.9-1.1, noise 10-30 dB SNR half the time, "
                        "gain +-6 dB); --no-augment also sets 0")
    t.add_argument("--whiten-dim", type=int, default=128)
    t.add_argument("--whiten-eps", type=float, default=0.01, help="whitening regulariser, a fraction of the top eigenvalue")
    t.add_argument("--head-dim", type=int, help="metric-head outputs (default: --bits minus --whiten-dim)")
    t.add_argument("--temperature", type=float, default=0.05, help="proxy-softmax temperature of the metric head")
    t.add_argument("--weight-decay", type=float, default=1e-3)
    t.add_argument("--cv-folds", type=int, default=8, help="class-disjoint cross-validation folds (0: none)")
    t.add_argument("--cv-classes", type=int, default=4, help="classes each fold holds out")
    p.set_defaults(func=run)


def _own_arguments() -> list[str]:
    """The options after `audio` (as `recall train audio ...`) or all of them (as `python -m`)."""
    argv = sys.argv[1:]
    return argv[argv.index("audio") + 1 :] if "audio" in argv else argv


def _command(args: argparse.Namespace) -> str:
    return "recall train audio " + " ".join(shlex.quote(a) for a in getattr(args, "argv", None) or _own_arguments())


def run_texture(args: argparse.Namespace) -> int:
    from pathlib import Path

    from app.training.audio.texture_fit import HeadTraining
    from app.training.audio.texture_train import TextureTrainConfig, train_texture

    head_dim = args.bits - args.whiten_dim if args.head_dim is None else args.head_dim
    if args.whiten_dim + head_dim != args.bits:
        print(f"recall train audio: error: --bits {args.bits} must equal --whiten-dim {args.whiten_dim} + "
              f"--head-dim {head_dim}", file=sys.stderr)
        return 2
    cfg = TextureTrainConfig(
        manifest=args.manifest, out=args.out, name=args.name or Path(args.out).name, holdout=args.holdout,
        sample_rate=args.sample_rate, window_s=args.window, hop_s=args.hop, train_hop_s=args.train_hop, pcen=args.pcen,
        augment_copies=args.augment_copies if args.augment else 0,
        whiten_dim=args.whiten_dim, whiten_eps=args.whiten_eps, head_dim=head_dim,
        dropout=0.2 if args.dropout is None else args.dropout,
        head=HeadTraining(steps=args.steps, batch_size=args.batch_size, lr=args.lr, weight_decay=args.weight_decay,
                          temperature=args.temperature, seed=args.seed),
        cv_folds=args.cv_folds, cv_classes=args.cv_classes, seed=args.seed, cache_dir=args.cache_dir or None,
        threads=args.threads, description=args.description, command=_command(args),
    )
    try:
        metrics = train_texture(cfg)
    except ValueError as exc:
        print(f"recall train audio: error: {exc}", file=sys.stderr)
        return 2
    cv = "no cross-validation" if metrics["cv_map"] is None else f"cross-validated MAP {metrics['cv_map']:.4f}"
    print(f"{cv}; fitted on {metrics['train_clips']} clips -> {args.out}")
    return 0


def frontend_features(spec: str | None) -> dict | None:
    """``--frontend speech-embedding[:PAD_S]`` -> the checkpoint's ``features`` dict (None: the paper's log-mel)."""
    if not spec:
        return None
    kind, _, pad = spec.partition(":")
    if kind != "speech-embedding":
        raise SystemExit(f"recall train audio: error: --frontend {spec!r}: known front-ends: speech-embedding[:PAD_S]")
    return {"kind": kind, "pad_s": float(pad or 0.0)}


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    if args.model == "texture-mlp":
        return run_texture(args)

    from app.training.audio.train import TrainConfig, Trainer

    cfg = TrainConfig(
        manifest=args.manifest, model=args.model, bits=args.bits, out=args.out, name=args.name or Path(args.out).name,
        split_by=args.split_by, holdout=args.holdout, val_groups=args.val_groups, sample_rate=args.sample_rate,
        window_s=args.window, hop_s=args.hop, hidden=args.hidden, heads=args.heads, d_a=args.d_a, hash_norm=args.hash_norm, output_relu=args.output_relu, dropout=args.dropout,
        epochs=args.epochs, steps_per_epoch=args.steps, batch_size=args.batch_size, lr=args.lr, patience=args.patience, lr_patience=args.lr_patience, keep=args.keep,
        seed=args.seed, split_seed=args.split_seed, alpha=args.alpha, beta=args.beta, gamma=args.gamma, quant_warmup=args.quant_warmup, margin=args.margin, pairs=args.pairs,
        mining=args.mining, augment=args.augment, spec_augment=args.spec_augment,
        cache_dir=args.cache_dir or None, threads=args.threads,
        device=args.device, description=args.description, extra_manifests=args.extra_manifests,
        command=_command(args), features=frontend_features(args.frontend), bank_copies=args.bank_copies,
    )
    try:
        trainer = Trainer(cfg)
    except ValueError as exc:  # bad manifest, split or extra data: say what, no traceback
        print(f"recall train audio: error: {exc}", file=sys.stderr)
        return 2
    metrics = trainer.run(resume=args.resume)
    print(f"best epoch {metrics['best_epoch']}: val MAP {metrics['val_map']:.4f} "
          f"(Hamming {metrics['val_map_hamming']:.4f}) -> {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m app.training.audio.cli ...`: the same command without the `recall` entry point."""
    parser = argparse.ArgumentParser(prog="python -m app.training.audio.cli")
    add_parser(parser.add_subparsers(dest="what", required=True))
    args = parser.parse_args(["audio", *(sys.argv[1:] if argv is None else argv)])
    args.argv = sys.argv[1:] if argv is None else argv  # the options the run records as its command
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
