"""Audio quality report: trained encoders vs the training-free baseline, measured in one run.

    python -m bench.audio.quality [--data ../shared/data] [--out reports/audio]

Three tasks on data no model trained on (the held-out groups are read from each checkpoint):

1. keyword query-by-example on Arabic Speech Commands, speaker-disjoint: every clip of the
   held-out speakers queries all the others (and, stricter, only other speakers' clips);
2. sound query-by-example on ESC-50 classes held out of training: a query is the most energetic
   window of a clip; an item's cost is the min over its windows (the service's rule);
3. spoken-term localisation: held-out utterances concatenated into long recordings with known
   times; a query from another held-out speaker ranks the recording's windows, non-maximum
   suppression keeps distinct places, and AxIoU@K (paper 002) and R@K at IoU > 0.5 score them.

Each is scored with float (cosine) and Hamming search of the same model. Metric names: ``map``
(paper 000 eq. 3), ``mp@1`` (paper 000: 1/rank of the first hit), ``precision@K`` (P@K of
paper 004, MP@K of paper 000), ``precision@n`` (P@N of paper 004), ``map_p004`` (paper 004's
MAP, eq. 13: the mean of P@1..P@N).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from app.encoders.base import Encoder
from app.encoders.checkpoint import read_config
from app.encoders.registry import create_encoder, discover
from app.eval import metrics as eval_metrics
from app.features.windows import cut_audible_windows, cut_windows
from app.search.ranking import non_maximum_suppression
from app.training.audio.data import Record, load_waves, read_manifest
from app.training.audio.augment import eval_window
from app.training.retrieval import best_window_scores, retrieval_metrics

KS = (1, 5, 10, 25)
NMS_IOU = 0.3  # windows overlapping a kept one by more are the same place (1 s windows at 0.5 s hop: 0.33)


def _unpack(codes: np.ndarray) -> np.ndarray:
    """Codes -> +-1 values in FAISS bit order, so ``retrieval.hamming_scores`` reads them back."""
    return np.unpackbits(codes, axis=1, bitorder="little").astype(np.float32) * 2 - 1


def _scores(encoder: Encoder, queries: list[np.ndarray], items: list[list[np.ndarray]]) -> dict[str, np.ndarray]:
    """(queries x items) similarity, float and Hamming; an item scores its best window (min cost)."""
    q = encoder.encode(queries)
    flat = [w for windows in items for w in windows]
    owner = np.repeat(np.arange(len(items)), [len(w) for w in items])
    d = encoder.encode(flat)
    out = {}
    for kind, (qa, da) in {"float": (q.floats, d.floats), "hamming": (_unpack(q.codes), _unpack(d.codes))}.items():
        window_scores = qa @ da.T if kind == "float" else -(qa.shape[1] - qa @ da.T) / 2
        out[kind] = best_window_scores(window_scores, owner, len(items))
    return out


def _check_against_eval_metrics(scores: np.ndarray, labels: np.ndarray, n: int = 25) -> None:
    """The matrix AP of the first ``n`` queries must equal ``app.eval.metrics.average_precision``."""
    aps = []
    for qi in range(min(n, len(labels))):
        row = scores[qi].astype(np.float64, copy=True)
        row[qi] = -np.inf
        order = [str(i) for i in np.argsort(-row, kind="stable") if i != qi]
        qrels = {str(i): 1.0 for i in range(len(labels)) if i != qi and labels[i] == labels[qi]}
        aps.append(eval_metrics.average_precision(order, qrels))
    if not np.allclose(_per_query_ap(scores, labels)[: len(aps)], aps):
        raise AssertionError("matrix AP disagrees with app.eval.metrics.average_precision")


def _per_query_ap(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    s = scores.astype(np.float64, copy=True)
    np.fill_diagonal(s, -np.inf)
    order = np.argsort(-s, axis=1, kind="stable")[:, :-1]
    hits = labels[order] == labels[:, None]
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    return (precision * hits).sum(axis=1) / np.maximum(hits.sum(axis=1), 1)


def _qbe(scores: dict[str, np.ndarray], labels: np.ndarray, exclude: np.ndarray | None = None) -> dict[str, Any]:
    out = {}
    for kind, s in scores.items():
        if exclude is None:
            _check_against_eval_metrics(s, labels)
            out[kind] = retrieval_metrics(s, labels, KS)
        else:
            out[kind] = _qbe_excluding(s, labels, exclude)
    return out


def _qbe_excluding(scores: np.ndarray, labels: np.ndarray, exclude: np.ndarray) -> dict[str, float]:
    """Metrics when each query may only retrieve items not in its ``exclude`` row."""
    rows = []
    for qi in range(len(labels)):
        allowed = ~exclude[qi]
        allowed[qi] = False
        order = np.flatnonzero(allowed)[np.argsort(-scores[qi, allowed], kind="stable")]
        hits = labels[order] == labels[qi]
        if not hits.any():
            continue
        precision = np.cumsum(hits) / np.arange(1, len(hits) + 1)
        n_rel = int(hits.sum())
        row = {"map": float((precision * hits).sum() / n_rel), "mp@1": 1.0 / (int(np.argmax(hits)) + 1),
               "precision@n": float(precision[n_rel - 1]), "map_p004": float(precision[:n_rel].mean())}
        row.update({f"precision@{k}": float(precision[min(k, len(hits)) - 1]) for k in KS})
        rows.append(row)
    return {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}


# ---- 1. keywords -------------------------------------------------------------------------------
def speech_qbe(encoders: dict[str, Encoder], records: list[Record]) -> dict[str, Any]:
    labels = np.array([r.label for r in records])
    speakers = np.array([r.speaker for r in records])
    same_speaker = speakers[:, None] == speakers[None, :]
    out: dict[str, Any] = {"queries": len(records), "speakers": sorted(set(speakers)), "keywords": len(set(labels))}
    for name, encoder in encoders.items():
        waves = load_waves(records, encoder.sample_rate, "/tmp/recall-audio-cache")
        items = [[w] for w in waves]  # a 1 s clip is one window
        scores = _scores(encoder, waves, items)
        out[name] = {"all": _qbe(scores, labels), "cross_speaker": _qbe(scores, labels, same_speaker)}
    return out


# ---- 2. sounds ---------------------------------------------------------------------------------
def sound_qbe(encoders: dict[str, Encoder], records: list[Record], window_s: float, hop_s: float) -> dict[str, Any]:
    labels = np.array([r.label for r in records])
    out: dict[str, Any] = {"queries": len(records), "classes": sorted(set(labels)), "window_s": window_s, "hop_s": hop_s}
    for name, encoder in encoders.items():
        waves = load_waves(records, encoder.sample_rate, "/tmp/recall-audio-cache")
        length = int(round(window_s * encoder.sample_rate))
        queries = [eval_window(w, length) for w in waves]
        items = [cut_windows(w, encoder.sample_rate, window_s, hop_s)[0] for w in waves]
        scores = _scores(encoder, queries, items)
        out[name] = _qbe(scores, labels)
        # which kinds of sound an encoder finds and which it does not (float search)
        ap = _per_query_ap(scores["float"], labels)
        out[name]["per_class_map"] = {c: float(ap[labels == c].mean()) for c in sorted(set(labels))}
    return out


# ---- 3. localisation ---------------------------------------------------------------------------
def build_recordings(records: list[Record], per_speaker: int, words: int, seed: int) -> list[dict[str, Any]]:
    """Long recordings: ``words`` distinct keywords of one speaker back to back, times known."""
    rng = np.random.default_rng(seed)
    by_speaker: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        by_speaker.setdefault(r.speaker, []).append(i)
    recordings = []
    for speaker, members in sorted(by_speaker.items()):
        for _ in range(per_speaker):
            chosen: dict[str, int] = {}
            for i in rng.permutation(members):
                chosen.setdefault(records[i].label, int(i))
            order = rng.permutation(sorted(chosen))[:words]
            recordings.append({"speaker": speaker, "parts": [chosen[w] for w in order]})
    return recordings


def _nms(scores: np.ndarray, times: np.ndarray, k: int) -> list[tuple[float, float, float]]:
    """The service's own occurrence step (app.search.ranking), so the report measures what users get."""
    segments = [(float(t0), float(t1), float(-score)) for (t0, t1), score in zip(times, scores)]
    return non_maximum_suppression(segments, NMS_IOU, k)


def localisation(encoders: dict[str, Encoder], records: list[Record], seed: int = 0, queries_per_recording: int = 5) -> dict[str, Any]:
    recordings = build_recordings(records, per_speaker=4, words=20, seed=seed)
    rng = np.random.default_rng(seed + 1)
    plan = []  # (recording index, query record index, true span)
    for ri, rec in enumerate(recordings):
        for position in rng.choice(len(rec["parts"]), size=queries_per_recording, replace=False):
            word = records[rec["parts"][position]].label
            others = [i for i, r in enumerate(records) if r.label == word and r.speaker != rec["speaker"]]
            plan.append((ri, int(rng.choice(others)), int(position)))
    out: dict[str, Any] = {"recordings": len(recordings), "words_per_recording": 20, "queries": len(plan), "nms_iou": NMS_IOU}
    for name, encoder in encoders.items():
        sr = encoder.sample_rate
        waves = load_waves(records, sr, "/tmp/recall-audio-cache")
        windows, starts = [], []
        for rec in recordings:
            parts = [waves[i] for i in rec["parts"]]
            starts.append(np.cumsum([0] + [len(p) for p in parts]) / sr)
            # the windows the service indexes: silent ones skipped
            windows.append(cut_audible_windows(np.concatenate(parts), sr, encoder.default_window_s, encoder.default_hop_s))
        per_recording = [encoder.encode(w) for w, _ in windows]
        query_emb = encoder.encode([waves[q] for _, q, _ in plan])
        result = {}
        for kind in ("float", "hamming"):
            axiou1, axiou5, r1, r5 = [], [], [], []
            for qi, (ri, _, position) in enumerate(plan):
                emb, times = per_recording[ri], windows[ri][1]
                if kind == "float":
                    s = emb.floats @ query_emb.floats[qi]
                else:
                    s = -np.abs(_unpack(emb.codes) - _unpack(query_emb.codes[qi : qi + 1])).sum(axis=1) / 2
                segments = [("rec", start, end) for start, end, _ in _nms(s, times, 5)]
                truth = {"rec": [(float(starts[ri][position]), float(starts[ri][position + 1]))]}
                axiou1.append(eval_metrics.axiou_at_k(segments, truth, 1))
                axiou5.append(eval_metrics.axiou_at_k(segments, truth, 5))
                r1.append(eval_metrics.recall_at_k_theta(segments, truth, 1, 0.5))
                r5.append(eval_metrics.recall_at_k_theta(segments, truth, 5, 0.5))
            result[kind] = {"axiou@1": float(np.mean(axiou1)), "axiou@5": float(np.mean(axiou5)),
                            "r@1,iou>0.5": float(np.mean(r1)), "r@5,iou>0.5": float(np.mean(r5))}
        out[name] = {"window_s": encoder.default_window_s, "hop_s": encoder.default_hop_s, **result}
    return out


# ---- report ------------------------------------------------------------------------------------
def _holdout(encoder_dir: str, fallback: list[str]) -> list[str]:
    try:
        return list(read_config(encoder_dir)["split"]["holdout"])
    except Exception:  # noqa: BLE001 - a baseline or an older checkpoint: use the documented split
        return fallback


def _markdown(report: dict[str, Any]) -> str:
    lines = ["# Audio quality (generated by `python -m bench.audio.quality`)", ""]
    cols = ["map", "mp@1", "precision@1", "precision@5", "precision@25", "precision@n", "map_p004"]

    def table(title: str, section: dict[str, Any], sub: str | None = None) -> None:
        lines.extend([f"## {title}", "", "| encoder | search | " + " | ".join(cols) + " |", "|---" * (len(cols) + 2) + "|"])
        for name, value in section.items():
            if not isinstance(value, dict) or "float" not in (value.get(sub, value) if sub else value):
                continue
            block = value[sub] if sub else value
            for kind in ("float", "hamming"):
                lines.append(f"| {name} | {kind} | " + " | ".join(f"{block[kind].get(c, float('nan')):.4f}" for c in cols) + " |")
        lines.append("")

    table("Keyword QbE, held-out speakers (all other clips)", report["speech_qbe"], "all")
    table("Keyword QbE, held-out speakers (other speakers' clips only)", report["speech_qbe"], "cross_speaker")
    if "sound_qbe" in report:
        sounds = report["sound_qbe"]
        table("Sound QbE, ESC-50 classes held out of training", sounds)
        names = [n for n, v in sounds.items() if isinstance(v, dict) and "per_class_map" in v]
        lines.extend(["MAP of each held-out class's queries (float search):", "",
                      "| class | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"])
        for c in sounds["classes"]:
            lines.append(f"| {c} | " + " | ".join(f"{sounds[n]['per_class_map'][c]:.3f}" for n in names) + " |")
        lines.append("")
    loc = report["localisation"]
    lines.extend(["## Spoken-term localisation in long recordings", "",
                  f"{loc['recordings']} recordings of {loc['words_per_recording']} held-out utterances, {loc['queries']} queries "
                  "by another held-out speaker; top windows after NMS.", "",
                  "| encoder | window/hop s | search | AxIoU@1 | AxIoU@5 | R@1,IoU>0.5 | R@5,IoU>0.5 |", "|---|---|---|---|---|---|---|"])
    for name, value in loc.items():
        if isinstance(value, dict) and "float" in value:
            for kind in ("float", "hamming"):
                v = value[kind]
                lines.append(f"| {name} | {value['window_s']}/{value['hop_s']} | {kind} | {v['axiou@1']:.4f} | {v['axiou@5']:.4f} | "
                             f"{v['r@1,iou>0.5']:.4f} | {v['r@5,iou>0.5']:.4f} |")
    lines.extend(["", "## Targets", ""] + [f"- {t}" for t in report["targets"]] + [""])
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data")
    parser.add_argument("--out", default="reports/audio")
    parser.add_argument("--speech", default="speech-attn-hash")
    parser.add_argument("--sounds", default="sounds-texture,sounds-attn-hash",
                        help="comma-separated general-sound encoders, compared in one run (the first one's window and hop apply)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.time()
    specs = discover()
    data = Path(args.data)
    baseline = create_encoder("audio-baseline", specs)
    speech = create_encoder(args.speech, specs)
    speakers = _holdout(specs[args.speech].source, ["00000001", "00000005", "00000006", "00000009", "00000011"])
    asc = [r for r in read_manifest(data / "asc" / "asc.csv") if r.speaker in set(speakers)]
    report: dict[str, Any] = {"speech_model": args.speech, "test_speakers": speakers}
    report["speech_qbe"] = speech_qbe({args.speech: speech, "audio-baseline": baseline}, asc)
    report["localisation"] = localisation({args.speech: speech, "audio-baseline": baseline}, asc)
    targets = []
    sm = report["speech_qbe"][args.speech]["all"]
    targets.append(f"speaker-disjoint keyword MAP >= 0.85: float {sm['float']['map']:.4f}, Hamming {sm['hamming']['map']:.4f} "
                   f"(baseline {report['speech_qbe']['audio-baseline']['all']['float']['map']:.4f})")
    targets.append(f"Hamming MAP >= 0.95 x float MAP ({args.speech}, {speech.bits} bits): "
                   f"{sm['hamming']['map'] / sm['float']['map']:.3f}")
    sound_models = [name for name in args.sounds.split(",") if name in specs]
    if sound_models:
        sounds = {name: create_encoder(name, specs) for name in sound_models}
        holdouts = {name: _holdout(specs[name].source, []) for name in sound_models}
        classes = holdouts[sound_models[0]]
        if any(sorted(h) != sorted(classes) for h in holdouts.values()):
            raise SystemExit(f"the sound models hold out different classes, so one run cannot compare them: {holdouts}")
        first = sounds[sound_models[0]]  # its window and hop apply to every encoder in the comparison
        esc = [r for r in read_manifest(data / "esc50" / "esc50.csv") if r.label in set(classes)]
        report["sounds_models"], report["test_classes"] = sound_models, classes
        report["sound_qbe"] = sound_qbe({**sounds, "audio-baseline": baseline, args.speech: speech}, esc,
                                        first.default_window_s, first.default_hop_s)
        base = report["sound_qbe"]["audio-baseline"]
        for name in sound_models:
            snd = report["sound_qbe"][name]
            targets.append(f"unseen ESC-50 classes MAP >= 1.5 x baseline ({name}): float {snd['float']['map']:.4f} vs "
                           f"{base['float']['map']:.4f} ({snd['float']['map'] / base['float']['map']:.2f}x); Hamming "
                           f"{snd['hamming']['map']:.4f} vs {base['hamming']['map']:.4f} ({snd['hamming']['map'] / base['hamming']['map']:.2f}x)")
            targets.append(f"Hamming MAP >= 0.95 x float MAP ({name}, {sounds[name].bits} bits): "
                           f"{snd['hamming']['map'] / snd['float']['map']:.3f}")
    loc = report["localisation"][args.speech]
    targets.append(f"localisation ({args.speech}): mean AxIoU@5 {loc['float']['axiou@5']:.4f} float / {loc['hamming']['axiou@5']:.4f} "
                   f"Hamming; R@1,IoU>0.5 {loc['float']['r@1,iou>0.5']:.4f} / {loc['hamming']['r@1,iou>0.5']:.4f}")
    report["targets"] = targets
    report["seconds"] = round(time.time() - started, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "quality.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    (out / "quality.md").write_text(_markdown(report))
    print("\n".join(targets))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
