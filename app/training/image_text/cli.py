"""`recall train image-text`: train the block network and write a checkpoint directory.

The default checkpoint app/assets/models/image-text-minilm is reproduced by::

    recall train image-text --photos /work/shared/data/coco --out app/assets/models/image-text-minilm \
        --steps 3500 --batch-size 128 --stop-step 1995

It was trained on a GPU with ``--device cuda --threads 8 --max-seconds 480`` instead of
``--stop-step``; the time budget ran out after step 1995, and ``--stop-step 1995`` replays that run's data
order, seeds and learning-rate schedule (weights differ slightly: CUDA and CPU kernels and dropout
draws are not bit-identical). On two free CPU cores that takes about half an hour (~0.85 s a step, plus ~2 min to
embed the 20k captions with MiniLM once; they are cached under --cache-dir).
"""

from __future__ import annotations

import argparse
import json
import sys

from app.training.image_text.train import TrainConfig


def add_parser(kinds: argparse._SubParsersAction) -> None:
    defaults = TrainConfig()
    parser = kinds.add_parser("image-text", help="image CNN tower + text tower + relevance head (paper 003)")
    parser.add_argument("--out", required=True, help="checkpoint directory to write")
    parser.add_argument("--photos", default=None, help="directory with captions.jsonl + images (real captioned photos)")
    parser.add_argument("--name", default=defaults.name, help="encoder name the registry will list")
    parser.add_argument("--text-features", choices=["minilm", "tfidf"], default=defaults.text_features,
                        help="pre-trained sentence vectors (minilm) or the TF-IDF bag-of-words fallback")
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--dim", type=int, default=defaults.dim, help="embedding size = bits of the code")
    parser.add_argument("--width", type=int, default=defaults.width, help="CNN width multiplier")
    parser.add_argument("--scenes", type=int, default=defaults.n_scenes, help="generated training scenes")
    parser.add_argument("--holdout", type=int, default=defaults.n_holdout, help="photos held out for the report")
    parser.add_argument("--photo-fraction", type=float, default=defaults.photo_fraction)
    parser.add_argument("--head-weight", type=float, default=defaults.head_weight)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--val-every", type=int, default=defaults.val_every)
    parser.add_argument("--cache-dir", default=defaults.cache_dir, help="where sentence vectors are cached")
    parser.add_argument("--max-seconds", type=float, default=None, help="stop early and save after this long")
    parser.add_argument("--stop-step", type=int, default=None,
                        help="stop after this step, keeping the schedule of --steps (replays a time-limited run)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from app.training.image_text.train import train

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    config = TrainConfig(
        name=args.name, text_features=args.text_features, steps=args.steps, batch_size=args.batch_size,
        lr=args.lr, dim=args.dim, width=args.width, n_scenes=args.scenes, photos_dir=args.photos,
        n_holdout=args.holdout, photo_fraction=args.photo_fraction, head_weight=args.head_weight,
        seed=args.seed, threads=args.threads, device=device, val_every=args.val_every,
        cache_dir=args.cache_dir, max_seconds=args.max_seconds,
        stop_step=args.stop_step,
    )
    _, _, metrics = train(config, args.out, progress=not args.no_progress)
    print(json.dumps({"out": args.out, "validation_scenes": metrics["validation_scenes"],
                      "train_seconds": metrics["train_seconds"]}, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (`python -m app.training.image_text.cli ...`), same options as `recall train image-text`."""
    parser = argparse.ArgumentParser(prog="python -m app.training.image_text.cli")
    add_parser(parser.add_subparsers(dest="what", required=True))
    args = parser.parse_args(["image-text", *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
