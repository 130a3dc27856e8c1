"""``--head-seeds N``: the speech head trained with N seeds, and the one with the best validation MAP kept.

One training run of the head is one draw: four seeds of the same recipe spread 0.02-0.04 MAP on the generalisation
bench's sets (reports/audio/commercial_view.md, round 12). Drawing several and keeping one by a dev score is still one
command. Every seed validates on the same speakers (the first seed's draw, passed as ``recall train audio
--split-seed``), or their MAPs would compare different speakers. Round 12 also found that this validation MAP (two ASC
speakers) did not order the four draws on the evaluation sets: the choice is reproducible, not proven better. The
scores of every seed are written to ``W/head-seeds.json`` and into the final checkpoint's config (``head_seeds``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

RECORD = "head-seeds.json"


def best_of_seeds(work: Path, first: int, count: int, train: Callable[[Path, int], Path]) -> Path:
    """Train (or reuse) ``W/speech-frontend-seed{s}`` for seeds ``first`` .. ``first + count - 1``; the directory of the
    head with the highest validation MAP (float), the lower seed on a tie."""
    scores: dict[int, float] = {}
    for seed in range(first, first + count):
        head = train(work / f"speech-frontend-seed{seed}", seed)
        scores[seed] = float(json.loads((head / "metrics.json").read_text())["val_map"])
    chosen = max(scores, key=lambda seed: (scores[seed], -seed))
    record = {"validation_split_seed": first, "val_map": {str(s): v for s, v in scores.items()}, "chosen": chosen}
    (work / RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return work / f"speech-frontend-seed{chosen}"


def record_choice(work: Path, out: Path) -> None:
    """Copy ``W/head-seeds.json`` into ``out``'s config as ``head_seeds`` (nothing when one seed was trained)."""
    path, config_path = work / RECORD, out / "config.json"
    if not path.is_file():
        return
    config = json.loads(config_path.read_text())
    config["head_seeds"] = json.loads(path.read_text())
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
