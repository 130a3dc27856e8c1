"""Round 7 of issue 37: log-mel channel equalisation in front of the frozen speech front-end, on dev sets only.

    python -m bench.audio.channel_norm --data ../shared/data [--out reports/audio/channel_norm.json]

The frozen row of the generalisation bench (app/eval/frontend_baselines.py: 1 s windows, frames averaged, the
collection mean removed, cosine and sign codes; windows and items as the service ranks them, bench.audio.sets.score)
with each equalisation variant (app/features/pretrained/channel_eq.py) between the front-end's log-mel and its
convolutions. The global spectrum is fitted on ASC's 13 training speakers (no labels). Dev sets, never the
evaluation sets: FSDD george + lucas (digits 0 1 3 4 6 8, pooled; also their cross-speaker MAP) and the trainer's two
ASC validation speakers (all keywords). The rule that picks a variant is in reports/audio/channel_norm.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from app.features.pretrained.channel_eq import ChannelEqualiser, fit_global
from app.training.general_audio.data import ASC_HOLDOUT_SPEAKERS
from app.training.retrieval import mean_window_scores
from bench.audio.sets import load_clips, score, windowed
from bench.audio.speech_dev import dev_set

ASC_VAL_SPEAKERS = ("00000023", "00000027")  # the trainer's validation speakers (seed 0), in speech/config.json
WINDOW_S, HOP_S = 1.0, 0.5
# name -> ChannelEqualiser options, in the rule's order of simplicity (``none``: the frozen row as published)
VARIANTS: dict[str, dict[str, Any] | None] = {
    "none": None,
    "all-1.0": {"frames": "all", "alpha": 1.0},
    "all-0.5": {"frames": "all", "alpha": 0.5},
    "speech-1.0": {"frames": "speech", "alpha": 1.0},
    "speech-0.5": {"frames": "speech", "alpha": 0.5},
    "cmvn": {"frames": "speech", "variance": True},
}


def _asc(data: Path, keep: Callable[[str], bool]) -> tuple[list[str], list[Path], list[str]]:
    with (data / "asc" / "asc.csv").open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if keep(r["speaker"])]
    return [r["keyword"] for r in rows], [data / "asc" / r["file"] for r in rows], [r["speaker"] for r in rows]


def _wave_batches(windows: list[np.ndarray], pad_s: float) -> list[torch.Tensor]:
    """The frozen row's 1 s batches, widened by ``pad_s`` of silence as the head's features are (0: the row as published)."""
    from app.eval.frontend_baselines import _batches

    pad = int(round(pad_s * 16000))
    return [torch.nn.functional.pad(b, (pad // 2, pad - pad // 2)) if pad else b for b in _batches(windows, WINDOW_S)]


def frozen_system(model: torch.nn.Module, equaliser: Callable | None, pad_s: float = 0.0,
                  centre_by: np.ndarray | None = None) -> tuple[Callable, float, float]:
    """The frozen row's embed function with ``equaliser`` between log-mel and convolutions; ``centre_by``
    (one group per window, in the order bench.audio.sets.windowed cuts them): remove each group's mean instead of
    the collection's (the speaker oracle, information only)."""
    from app.eval.frontend_baselines import _centred

    def embed(windows: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        out, start = [], 0
        with torch.inference_mode():
            for b in _wave_batches(windows, pad_s):
                mel = model.logmel(b)
                mel = mel if equaliser is None else equaliser(mel, slice(start, start + len(b)))
                out.append(model.frames_of(mel).mean(dim=1).numpy())
                start += len(b)
        x = np.concatenate(out)
        if centre_by is None:
            return _centred(x)
        assert len(centre_by) == len(x)
        for group in np.unique(centre_by):
            x[centre_by == group] -= x[centre_by == group].mean(axis=0)
        return x.astype(np.float32), np.where(x > 0, 1.0, -1.0).astype(np.float32)

    return embed, WINDOW_S, HOP_S


def per_window(eq: ChannelEqualiser) -> Callable:
    return lambda mel, _rows: eq(mel)


def speaker_oracle_equaliser(model: torch.nn.Module, clips: list[np.ndarray], speakers: list[str], g: list[float],
                             pad_s: float) -> tuple[Callable, np.ndarray]:
    """Information only (it reads speaker labels, which the service never has): each window's log-mel shifted by its
    speaker's mean spectrum over all that speaker's windows (speech frames) instead of its own window's."""
    from app.features.pretrained.channel_eq import window_stats

    flat, owner, _ = windowed(clips, WINDOW_S, HOP_S)
    spk = np.asarray(speakers)[owner]
    with torch.inference_mode():
        m_w = torch.cat([window_stats(model.logmel(b), "speech")[0] for b in _wave_batches(flat, pad_s)])
    shift = torch.zeros_like(m_w)
    for s in np.unique(spk):
        rows = torch.from_numpy(np.flatnonzero(spk == s))
        shift[rows] = torch.tensor(g) - m_w[rows].mean(dim=0)
    return (lambda mel, rows: mel + shift[rows].unsqueeze(1)), spk


def cross_speaker_map(system: tuple[Callable, float, float], clips: list[np.ndarray], labels: list[str],
                      speakers: list[str]) -> dict[str, float]:
    """MAP of queries by one speaker over the other speakers' clips only (relevant = same label)."""
    embed, window_s, hop_s = system
    flat, owner, keep = windowed(clips, window_s, hop_s)
    floats, signs = embed(flat)
    unit = floats / np.maximum(np.linalg.norm(floats, axis=1, keepdims=True), 1e-12)
    labels_arr, spk, n = np.asarray(labels), np.asarray(speakers), len(labels)
    out = {}
    for kind, sim in (("float", unit @ unit.T), ("hamming", signs @ signs.T)):
        items = mean_window_scores(sim[np.ix_(keep, keep)], owner[keep], n)
        aps = []
        for q in range(n):
            other = np.flatnonzero(spk != spk[q])
            hits = labels_arr[other[np.argsort(-items[q, other], kind="stable")]] == labels_arr[q]
            if hits.any():
                aps.append(float((np.cumsum(hits) / np.arange(1, len(hits) + 1))[hits].mean()))
        out[kind] = round(float(np.mean(aps)), 4)
    return out


def _row(make_system: Callable, sets: dict[str, tuple[list[np.ndarray], list[str], list[str]]]) -> dict[str, Any]:
    """One system's dev scores; ``make_system(clips, speakers)`` (an oracle's system depends on the set)."""
    (fsdd, fsdd_labels, fsdd_speakers), (asc, asc_labels, asc_speakers) = sets["fsdd"], sets["asc"]
    fsdd_system = make_system(fsdd, fsdd_speakers)
    fsdd_score, asc_score = score(fsdd_system, fsdd, fsdd_labels), score(make_system(asc, asc_speakers), asc, asc_labels)
    return {"dev1_fsdd_george_lucas": {k: fsdd_score[k] for k in ("float", "hamming")},
            "dev1_cross_speaker": cross_speaker_map(fsdd_system, fsdd, fsdd_labels, fsdd_speakers),
            "dev2_asc_val": {k: asc_score[k] for k in ("float", "hamming")},
            "mean_float": round((fsdd_score["float"] + asc_score["float"]) / 2, 4)}


def head_speaker_oracle(directory: str, sets: dict[str, tuple[list[np.ndarray], list[str], list[str]]]) -> dict[str, Any]:
    """Information only: a trained checkpoint's floats as the service ranks them, centred by the collection mean,
    and centred per speaker (labels the service never has): how much of its cross-speaker loss is a per-speaker offset."""
    from app.encoders.registry import load_checkpoint_dir
    from bench.audio.sets import encoder_system

    embed, window_s, hop_s = encoder_system(load_checkpoint_dir(directory))
    out: dict[str, Any] = {}
    for name, (clips, labels, speakers) in sets.items():
        flat, owner, _ = windowed(clips, window_s, hop_s)
        floats, signs = embed(flat)
        spk = np.asarray(speakers)[owner]
        by_speaker = floats.copy()
        for s in np.unique(spk):
            by_speaker[spk == s] -= floats[spk == s].mean(axis=0)
        variants = {"as served": (floats, signs), "collection mean removed": (floats - floats.mean(axis=0), None),
                    "speaker mean removed (oracle)": (by_speaker, None)}
        for label, (x, codes) in variants.items():
            system = ((lambda _w, x=x, codes=codes: (x, codes if codes is not None else np.where(x > 0, 1.0, -1.0)
                                                     .astype(np.float32))), window_s, hop_s)
            result = score(system, clips, labels)
            row = {"float": result["float"], "hamming_of_signs": result["hamming"]}
            if name == "fsdd":
                row["cross_speaker"] = cross_speaker_map(system, clips, labels, speakers)
            out[f"{name}: {label}"] = row
            print(directory, name, label, row, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    from app.features.pretrained import shared

    parser = argparse.ArgumentParser(prog="python -m bench.audio.channel_norm")
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="reports/audio/channel_norm.json")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--heads", default="", help="comma-separated checkpoint dirs: the speaker oracle on their floats "
                        "(information; a head trained with FSDD has heard dev 1's speakers)")
    parser.add_argument("--pads", default="0.0,0.4",
                        help="pad_s values: 0.0 is the frozen row the rule reads; 0.4 (the head's padding) is information")
    args = parser.parse_args(argv)
    data = Path(args.data)
    torch.set_num_threads(1)
    model = shared("speech-embedding")
    fsdd_labels, fsdd_paths = dev_set(data, ("george", "lucas"))
    asc_labels, asc_paths, asc_speakers = _asc(data, lambda s: s in ASC_VAL_SPEAKERS)
    _, fit_paths, _ = _asc(data, lambda s: s not in ASC_VAL_SPEAKERS and s not in ASC_HOLDOUT_SPEAKERS)
    sets = {"fsdd": (load_clips(fsdd_paths), fsdd_labels, [p.name.split("_")[1] for p in fsdd_paths]),
            "asc": (load_clips(asc_paths), asc_labels, asc_speakers)}
    fit_windows = [w for w, k in zip(*windowed(load_clips(fit_paths), WINDOW_S, HOP_S)[::2]) if k]
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "protocol": "frozen speech_embedding row: 1 s windows (widened by pad_s), frames averaged, "
                                          "collection mean removed; bench.audio.sets.score (service windows, mean rule)",
                              "fit_windows": len(fit_windows), "dev_fsdd_clips": len(fsdd_labels),
                              "dev_asc_clips": len(asc_labels), "rule_reads": "pad_s=0.0", "variants": {}, "oracles": {}}
    for pad_s in (float(p) for p in args.pads.split(",") if p):
        with torch.inference_mode():
            fit_mels = [model.logmel(b) for b in _wave_batches(fit_windows, pad_s)]
        for name in [v for v in args.variants.split(",") if v]:
            options = VARIANTS[name]
            fitted = None if options is None else fit_global(fit_mels, options["frames"])
            equaliser = None if options is None else per_window(ChannelEqualiser(**fitted, **options))
            row = _row(lambda clips, speakers: frozen_system(model, equaliser, pad_s), sets)
            report["variants"][f"{name}, pad_s={pad_s}"] = {**row, "options": options}
            print(name, pad_s, row, flush=True)
        # information only: what the speaker offset is worth when the speaker is known (labels the service never has)
        g = fit_global(fit_mels, "speech")["mean"]
        oracles = {
            "speaker log-mel mean (speech frames) instead of the window's":
                lambda clips, speakers: frozen_system(model, *speaker_oracle_equaliser(model, clips, speakers, g, pad_s)[:1],
                                                      pad_s),
            "vectors centred per speaker instead of per collection":
                lambda clips, speakers: frozen_system(model, None, pad_s, centre_by=np.asarray(speakers)[
                    windowed(clips, WINDOW_S, HOP_S)[1]]),
        }
        for name, make in oracles.items():
            row = _row(make, sets)
            report["oracles"][f"{name}, pad_s={pad_s}"] = row
            print("oracle", name, pad_s, row, flush=True)
    report["heads"] = {d: head_speaker_oracle(d, sets) for d in args.heads.split(",") if d}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
