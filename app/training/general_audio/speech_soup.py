"""``recall train general-audio --speech-soup A,B,C``: one speech branch from several fine-tunes, by averaging.

Why: fine-tuning the speech branch from ``speech-attn-hash`` is noisy. The same recipe at seeds 0, 1
and 2 moves unseen digit words by up to 0.07 MAP (reports/audio/README.md), so any one run is partly
a draw. Fine-tunes of one network from one starting point tend to stay in one basin, where the
uniform average of their weights (a "model soup", Wortsman et al. 2022) is about as good as the best
of them and steadier than any; it costs nothing at query time, unlike running several networks.

The steps, for routed-fusion checkpoints whose speech branches share an architecture and the weights
they started from (checked), and which left out the same data (checked):

1. every floating-point tensor of the speech branches averaged (integer buffers, only batch-norm's step
   counter here, taken from the first);
2. the hash layer's batch-norm statistics estimated again with the averaged weights, in eval mode,
   on unlabelled training-side windows (``speech_views_fit.fit_paths``: no labels, no held-out
   speaker or word), as stochastic weight averaging does: those statistics set each bit's
   threshold, and an average of the ingredients' statistics is not the statistics of the averaged
   network;
3. the sounds branch and router copied from the first source (the others' are not used: the recipe fits
   the router again afterwards, and a sounds branch trained at another seed is no better a choice).

The result is a routed-fusion checkpoint like a fine-tune's, ready for ``--views-from``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from app.features.pretrained import sha256_file
from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from app.encoders.audio.routed_fusion import FAMILY
from app.training.general_audio.router_fit import copy_branch


def average_states(states: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The uniform average of state dicts with the same names and shapes (integer tensors: the first's)."""
    if not states:
        raise ValueError("no state dicts to average")
    names = set(states[0])
    for i, state in enumerate(states[1:], 1):
        if set(state) != names:
            raise CheckpointError(f"soup ingredient {i} has other tensors: {sorted(set(state) ^ names)[:5]}")
    out = {}
    for name, first in states[0].items():
        if any(s[name].shape != first.shape for s in states):
            raise CheckpointError(f"soup ingredients disagree on the shape of {name}")
        if first.is_floating_point():
            out[name] = (sum(s[name].double() for s in states) / len(states)).to(first.dtype)
        else:
            out[name] = first.clone()
    return out


def reestimate_hash_norm(net: torch.nn.Module, feature_batches) -> int:
    """Set ``net.hash_norm``'s running mean and (unbiased) variance to those of the hash layer's
    pre-activations over every window of ``feature_batches``, the network in eval mode (no dropout).
    Pooled over windows, not averaged per batch as batch-norm's cumulative mode would. Returns the
    number of windows."""
    norm = getattr(net, "hash_norm", None)
    if norm is None:
        return 0
    net.eval()
    total, squares, seen = None, None, 0

    def collect(_module, _inputs, output: torch.Tensor) -> None:
        nonlocal total, squares, seen
        z = output.double()
        total = z.sum(0) if total is None else total + z.sum(0)
        squares = (z * z).sum(0) if squares is None else squares + (z * z).sum(0)
        seen += len(z)

    hook = net.hash.register_forward_hook(collect)
    try:
        with torch.no_grad():
            for feats in feature_batches:
                net(feats)
    finally:
        hook.remove()
    if seen < 2:
        raise SystemExit("--speech-soup: too few training-side windows to estimate the hash layer's statistics on")
    mean = total / seen
    norm.running_mean.copy_(mean.to(norm.running_mean.dtype))
    norm.running_var.copy_(((squares - seen * mean * mean) / (seen - 1)).to(norm.running_var.dtype))
    return seen


def starting_point(speech_config: dict[str, Any]) -> tuple[str, Any]:
    """What a speech branch's training started from: the weights it was fine-tuned from, or (trained from
    scratch) the seed that drew its initial weights."""
    init = speech_config.get("init_from") or {}
    if init.get("weights_sha256"):
        return ("weights", init["weights_sha256"])
    return ("scratch, seed", speech_config.get("training", {}).get("seed"))


def check_ingredients(sources: list[Path]) -> list[dict[str, Any]]:
    """The sources' speech configs, after checking they can be averaged (see the module docstring)."""
    if len(sources) < 2:
        raise SystemExit("--speech-soup needs at least two checkpoints, comma-separated")
    configs, left_out = [], []
    for source in sources:
        stored = read_config(source)
        if stored.get("family") != FAMILY or stored.get("speech_views") is not None:
            raise CheckpointError(f"{source}: --speech-soup needs routed-fusion checkpoints without speech views")
        configs.append(read_config(source / "speech"))
        left_out.append((stored.get("without"), stored.get("holdout")))
    first = configs[0]
    for source, config, held in zip(sources[1:], configs[1:], left_out[1:]):
        if held != left_out[0]:  # else the soup would have heard what one ingredient's evaluation holds out
            raise CheckpointError(f"{source}: it left out other data (--without, held-out speakers, words or classes) "
                                  f"than {sources[0]}")
        for key in ("family", "arch", "features", "sample_rate"):
            if config.get(key) != first.get(key):
                raise CheckpointError(f"{source}: its speech branch's {key} differs from {sources[0]}'s")
        if starting_point(config) != starting_point(first):
            raise CheckpointError(f"{source}: its speech branch started from other weights than {sources[0]}'s; "
                                  "only fine-tunes of one network average well")
    return configs


def soup_checkpoint(data: Path, sources: list[Path], out: Path, seed: int, config_update: dict[str, Any]) -> dict[str, Any]:
    """Write ``out`` (see the module docstring); returns its metrics."""
    sources, out = [Path(s) for s in sources], Path(out)
    if out.resolve() in {s.resolve() for s in sources}:
        raise SystemExit("--out must differ from every --speech-soup source")
    configs = check_ingredients(sources)
    stored = read_config(sources[0])
    # the soup trained on every speaker any ingredient trained on: only speakers none of them saw stay out
    val = sorted(set.intersection(*(set(c.get("split", {}).get("val", [])) for c in configs)))
    speech_config = {**configs[0], "split": {**configs[0].get("split", {}), "val": val},
                     "soup_of": [{"path": str(s), "val": c.get("split", {}).get("val", []),
                                  "weights_sha256": sha256_file(s / "speech" / "weights.safetensors")}
                                 for s, c in zip(sources, configs)]}
    out.mkdir(parents=True, exist_ok=True)
    copy_branch(sources[0] / "sounds", out / "sounds")
    # written once with the averaged weights so the encoder (features, resampling) loads as the service loads it,
    # then again with the thresholds estimated through that encoder
    save_checkpoint(out / "speech", average_states([load_checkpoint(s / "speech")[0] for s in sources]), speech_config)
    router, _ = load_checkpoint(sources[0])
    # each ingredient's own command, so the whole chain can be run again from the config alone
    ingredients = [{"path": str(s), "train": read_config(s).get("reproduce", {}).get("train")} for s in sources]
    config = {**stored, **config_update, "speech_soup": {"of": ingredients, "seed": seed,
                                                         "sounds_and_router_from": str(sources[0])}}
    save_checkpoint(out, router, config, {})
    state, seen = fit_bit_thresholds(data, out, seed, stored.get("without"))
    metrics = {"soup_ingredients": len(sources), **seen}
    save_checkpoint(out / "speech", state, speech_config, metrics)
    card = (sources[0] / "DATA.md").read_text() if (sources[0] / "DATA.md").is_file() else ""
    (out / "DATA.md").write_text(card + "\n" + soup_note(config.get("version"), configs) + "\n")
    return metrics


def fit_bit_thresholds(data: Path, checkpoint: Path, seed: int,
                       without: str | None) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """Step 2 of the module docstring for ``checkpoint``'s (averaged) speech branch: its new weights, and how
    much data the statistics saw."""
    from app.encoders.registry import load_checkpoint_dir
    from app.training.audio.data import Record, load_waves
    from app.training.general_audio.speech_views_fit import fit_paths, window_batches

    encoder = load_checkpoint_dir(checkpoint)
    paths = fit_paths(data, read_config(checkpoint / "speech"), seed, without)
    clips = load_waves([Record(str(p), "") for p in paths], encoder.sample_rate, cache_dir="/tmp/recall-audio-cache")
    speech = encoder.speech
    batches = (speech.features(encoder._speech_waves(waves)) for waves in
               window_batches(clips, encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s, encoder.window))
    windows = reestimate_hash_norm(speech.net, batches)
    return speech.net.state_dict(), {"hash_norm_windows": windows, "hash_norm_clips": len(paths)}


def soup_note(version: str | None, configs: list[dict[str, Any]]) -> str:
    """The data card's paragraph on the soup: the same data, and what the ingredients' augmentation made."""
    channel = sum(bool(c.get("training", {}).get("channel_augment")) for c in configs)
    made = (f" {channel} of them also heard their training clips through random equalisers and synthetic rooms "
            "(app/training/audio/channel_augment.py), made by this project." if channel else "")
    return (f"The speech branch of version {version} is the weight average (`--speech-soup`) of {len(configs)} "
            "fine-tunes of one network on the data above, at different seeds; together they trained on every "
            f"training-side speaker listed.{made}")
