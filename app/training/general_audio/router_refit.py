"""``recall train general-audio --router-from DIR``: a routed-fusion checkpoint with its router fitted again.

Nothing is trained: the branches and the speech views are DIR's, byte for byte; only the router
(a logistic regression on the sounds branch's statistics, app/training/general_audio/router_fit.py) is refitted
on the recipe's router windows, e.g. with ``--router-negatives varied`` (version 4). The corpora DIR
was trained ``--without`` stay left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from app.encoders.audio.speech_views import PREFIX as VIEWS_PREFIX
from app.training.general_audio.router_fit import copy_branch, fit_router, texture_statistics

RouterWindows = Callable[[str | None], tuple[list[np.ndarray], list[np.ndarray]]]


def refit_router_checkpoint(source: Path, out: Path, router_windows: RouterWindows, config_update: dict[str, Any],
                            data_note: str = "") -> dict[str, Any]:
    """Write ``out``: ``source`` with a router fitted on ``router_windows(source's without)``; returns the metrics.
    ``data_note`` is appended to the source's DATA.md (what the new router saw besides its data)."""
    from app.encoders.registry import load_checkpoint_dir

    source, out = Path(source), Path(out)
    if source.resolve() == out.resolve():
        raise SystemExit("--router-from and --out must differ (the source checkpoint is read while the new one is written)")
    stored = read_config(source)
    if stored.get("family") != "routed-fusion":
        raise CheckpointError(f"{source}: --router-from needs a routed-fusion checkpoint, not {stored.get('family')!r}")
    sounds = load_checkpoint_dir(source / "sounds")
    speech_windows, other_windows = router_windows(stored.get("without"))
    router, accuracy = fit_router(texture_statistics(sounds.features, speech_windows),
                                  texture_statistics(sounds.features, other_windows))
    state, _ = load_checkpoint(source)
    views = {k: v for k, v in state.items() if k.startswith(VIEWS_PREFIX)}
    out.mkdir(parents=True, exist_ok=True)
    for branch in ("speech", "sounds"):
        copy_branch(source / branch, out / branch)
    card = (source / "DATA.md").read_text() if (source / "DATA.md").is_file() else ""
    if card or data_note:
        (out / "DATA.md").write_text(card + (f"\n{data_note}\n" if data_note else ""))
    config = {**stored, **config_update, "router_from": {"name": stored.get("name"), "version": stored.get("version")}}
    metrics = {"router_accuracy": accuracy, "router_windows": {"speech": len(speech_windows), "other": len(other_windows)}}
    save_checkpoint(out, {**router.state_dict(), **views}, config, metrics)
    return metrics
