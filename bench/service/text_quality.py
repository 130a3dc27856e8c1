"""Issue 35's rule for a text-query speed change, measured: R@10 and top-10 overlap on the text-to-image dev sets.

A speed change may alter answers when, on the dev sets and in the same run, R@10 drops by at most 0.005
(absolute) and the top-10 lists overlap the unchanged system's by at least 0.90 on average. Two dev sets:

* ``coco_heldout``: the 40 held-out COCO photos and their 200 captions the README's text-to-image table
  reports (``reports/image_text/report.md``; training never read them), read from ``--photos``;
* ``generated_val``: the 300 generated validation scenes training validated on (seed 10,000), every caption.

Each caption is embedded alone, as a search embeds its query, by one encoder per variant (the MiniLM query
precision of :func:`app.encoders.image_text.text_features.set_query_precision`; the image side is shared),
and ranked as the service ranks: stage 1 (inner product) and stage 1 re-ranked by the relevance head
(R = 100, so every photo of these sets). R@10: the query's own image in the top 10.

    python -m bench.service.text_quality [--photos /work/shared/data/coco]   # prints JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_PHOTOS = Path("/work/shared/data/coco")
MAX_R10_DROP = 0.005
MIN_OVERLAP = 0.90
RERANK_DEPTH = 100


def dev_sets(encoder: Any, photos_dir: Path | None) -> dict[str, tuple[np.ndarray, list[str], np.ndarray]]:
    """name -> (image embeddings (n, dim), captions, each caption's image index)."""
    from app.training.image_text.data import load_photo, read_records
    from app.training.synthesis.images import generate_scenes, render

    sets = {}
    if photos_dir is not None and photos_dir.is_dir():
        held = set(encoder.config["held_out_files"])
        photos = [load_photo(photos_dir, r) for r in read_records(photos_dir) if r["file"] in held]
        sets["coco_heldout"] = ([p.pixels for p in photos], [(i, c) for i, p in enumerate(photos) for c in p.captions])
    seed = int(encoder.config["train"]["seed"]) + 10_000  # app/training/image_text/train.py's validation scenes
    scenes = generate_scenes(int(encoder.config["train"]["n_val_scenes"]), seed=seed)
    sets["generated_val"] = ([render(s) for s in scenes], [(i, c) for i, s in enumerate(scenes) for c in s.captions])
    out = {}
    for name, (images, queries) in sets.items():
        owners = np.asarray([i for i, _ in queries])
        out[name] = (encoder.encode(images).floats, [c for _, c in queries], owners)
    return out


def rankings(encoder: Any, texts: list[str], images: np.ndarray) -> dict[str, np.ndarray]:
    """Best-first image indices per caption: ``stage1`` and ``rerank`` (the head over stage 1's top R)."""
    from app.training.image_text.report import rerank_scores

    queries = np.concatenate([encoder.encode_text([t]).floats for t in texts])  # one at a time, as served
    stage1 = queries @ images.T
    reranked = rerank_scores(encoder, texts, stage1, images, RERANK_DEPTH)
    return {"stage1": np.argsort(-stage1, axis=1, kind="stable"), "rerank": np.argsort(-reranked, axis=1, kind="stable")}


def recall_at_10(order: np.ndarray, owners: np.ndarray) -> float:
    return float(np.mean([owner in row[:10] for row, owner in zip(order, owners)]))


def top10_overlap(a: np.ndarray, b: np.ndarray) -> float:
    """Mean over queries of |top-10 of a & top-10 of b| / 10."""
    return float(np.mean([len(set(x[:10]) & set(y[:10])) / 10 for x, y in zip(a, b)]))


def compare(unchanged: Any, changed: Any, sets: dict[str, tuple[np.ndarray, list[str], np.ndarray]]) -> dict[str, Any]:
    """Per dev set and ranking: R@10 of both, the drop, the overlap, and whether the rule holds."""
    out: dict[str, Any] = {}
    for name, (images, texts, owners) in sets.items():
        before, after = rankings(unchanged, texts, images), rankings(changed, texts, images)
        rows = {}
        for kind in before:
            r_before, r_after = recall_at_10(before[kind], owners), recall_at_10(after[kind], owners)
            overlap = top10_overlap(before[kind], after[kind])
            rows[kind] = {"R@10_unchanged": r_before, "R@10_changed": r_after, "R@10_drop": r_before - r_after,
                          "top10_overlap": overlap,
                          "rule_met": bool(r_before - r_after <= MAX_R10_DROP + 1e-12 and overlap >= MIN_OVERLAP)}
        out[name] = {"images": len(images), "queries": len(texts), **rows}
    out["rule_met"] = all(row["rule_met"] for s in out.values() if isinstance(s, dict) for row in s.values()
                          if isinstance(row, dict))
    return out


def encoder_with_precision(precision: str) -> Any:
    """A fresh default image-text encoder whose MiniLM embeds queries at ``precision``."""
    from app.encoders.registry import create_encoder, discover
    from app.settings import Settings

    encoder = create_encoder(Settings().encoders.default_image, discover())
    encoder.text_features.precision = precision
    return encoder


def quality(photos_dir: Path | None, unchanged: str = "half", changed: str = "int8") -> dict[str, Any]:
    return qualities(photos_dir, unchanged, [changed])[changed]


def qualities(photos_dir: Path | None, unchanged: str, changed: list[str]) -> dict[str, dict[str, Any]]:
    """:func:`quality` of each changed precision against the same unchanged encoder and dev sets."""
    a = encoder_with_precision(unchanged)
    sets = dev_sets(a, photos_dir)
    return {precision: {"unchanged": unchanged, "changed": precision,
                        "rule": {"max_R@10_drop": MAX_R10_DROP, "min_top10_overlap": MIN_OVERLAP},
                        "rerank_depth": RERANK_DEPTH, **compare(a, encoder_with_precision(precision), sets)}
            for precision in changed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=Path, default=DEFAULT_PHOTOS)
    parser.add_argument("--unchanged", default="half")
    parser.add_argument("--changed", default="int8", help="comma-separated precisions")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    print(json.dumps(qualities(args.photos, args.unchanged, args.changed.split(",")), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
