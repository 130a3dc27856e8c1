"""Dev score of speech checkpoints: FSDD lucas's digits 0 1 3 4 6 8, leave-one-out MAP as the service ranks.

    python -m bench.audio.speech_dev --data ../shared/data DIR [DIR ...] [--speakers george,lucas] [--out F.json]

The second round of version 6 (reports/audio/version6.md) trains candidate heads on FSDD george alone and
picks one by this score (with the trainer's own validation MAP), so jackson and nicolas, the generalisation
bench's test speakers, are never looked at while choosing. ``--speakers george,lucas`` pools two training-side
voices instead (round 6, reports/audio/speaker_negatives.md): queries must find the other voice's takes too, which
is the cross-speaker retrieval the test speakers need; it is a clean dev set for heads trained without FSDD.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from app.training.general_audio.data import FSDD_HOLDOUT_WORDS
from bench.audio.sets import encoder_system, load_clips, score

DEV_SPEAKER = "lucas"


def dev_set(data: Path, speakers: tuple[str, ...] = (DEV_SPEAKER,)) -> tuple[list[str], list[Path]]:
    with (data / "fsdd" / "fsdd.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["speaker"] in speakers and r["digit"] not in FSDD_HOLDOUT_WORDS]
    return [r["digit"] for r in rows], [data / "fsdd" / r["file"] for r in rows]


def main(argv: list[str] | None = None) -> int:
    from app.encoders.registry import load_checkpoint_dir

    parser = argparse.ArgumentParser(prog="python -m bench.audio.speech_dev")
    parser.add_argument("checkpoints", nargs="+")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--speakers", default=DEV_SPEAKER, help="comma-separated FSDD speakers, pooled")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    speakers = tuple(s for s in args.speakers.split(",") if s)
    labels, paths = dev_set(Path(args.data), speakers)
    key = "dev_" + "_".join(speakers)
    clips = load_clips(paths)
    report = {}
    for directory in args.checkpoints:
        metrics = json.loads((Path(directory) / "metrics.json").read_text())
        result = score(encoder_system(load_checkpoint_dir(directory)), clips, labels)
        report[directory] = {key: {k: result[k] for k in ("float", "hamming")},
                             "val_map": round(metrics["val_map"], 4), "best_epoch": metrics.get("best_epoch"),
                             "rule_score": round((metrics["val_map"] + result["float"]) / 2, 4)}
        print(directory, report[directory], flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
