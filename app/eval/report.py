"""Evaluation reports: a metrics table plus matplotlib PNG plots, as HTML or Markdown.

Plots (each optional input adds its own):
* MP@K against K (paper 000, Fig. 3), one line per system;
* precision-recall curves: 11-point interpolated precision averaged over queries;
* per-class P@K, when queries have classes (paper 000 reports per-class precision);
* a t-SNE map of embeddings coloured by class (paper 000, Fig. 5);
* confidence in the ranking and accuracy against judgments made, from a simulated MTC run
  (paper 001, Fig. 2-3).

matplotlib and scikit-learn are imported inside the plotting functions, so importing this
module stays cheap.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from app.eval.metrics import Qrels, Ranking, precision_at_k

DPI = 80  # small PNGs: a report of five plots stays well under 200 KB
FIGSIZE = (5.5, 3.6)


# ---------------------------------------------------------------- numbers behind the plots


def mp_at_k_curve(rankings: Mapping[str, Ranking], qrels: Mapping[str, Qrels], k_max: int) -> np.ndarray:
    """Mean over judged queries of P@K for K = 1..k_max (paper 000's MP@K curve)."""
    qids = sorted(qrels)
    return np.array([np.mean([precision_at_k(rankings.get(q, []), qrels[q], k) for q in qids]) for k in range(1, k_max + 1)])


def interpolated_precision_recall(
    rankings: Mapping[str, Ranking], qrels: Mapping[str, Qrels], recall_levels: Sequence[float] = tuple(np.linspace(0, 1, 11))
) -> np.ndarray:
    """Interpolated precision at each recall level, averaged over queries with a relevant document.

    Interpolated precision at recall r is the highest precision at any rank whose recall is
    >= r (trec_eval ``iprec_at_recall``); 0 where that recall is never reached.
    """
    levels = np.asarray(recall_levels, dtype=float)
    curves = []
    for qid, judged in qrels.items():
        n_rel = sum(1 for g in judged.values() if g > 0)
        if n_rel == 0:
            continue
        flags = np.array([judged.get(doc, 0) > 0 for doc in rankings.get(qid, [])], dtype=float)
        if flags.size == 0:
            curves.append(np.zeros_like(levels))
            continue
        hits = np.cumsum(flags)
        precision = hits / np.arange(1, flags.size + 1)
        recall = hits / n_rel
        curves.append(np.array([precision[recall >= r].max() if np.any(recall >= r) else 0.0 for r in levels]))
    return np.mean(curves, axis=0) if curves else np.zeros_like(levels)


def per_class_precision(
    rankings: Mapping[str, Ranking], qrels: Mapping[str, Qrels], query_classes: Mapping[str, str], k: int
) -> dict[str, float]:
    """Mean P@k over the judged queries of each class (queries without a class are skipped)."""
    by_class: dict[str, list[float]] = {}
    for qid in qrels:
        if qid in query_classes:
            by_class.setdefault(query_classes[qid], []).append(precision_at_k(rankings.get(qid, []), qrels[qid], k))
    return {label: float(np.mean(values)) for label, values in sorted(by_class.items())}


# ---------------------------------------------------------------- plots


def _figure():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")  # headless: reports are written by CLIs and CI, never shown
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=FIGSIZE)
    return plt, fig, ax


def _save(plt, fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_mp_at_k(curves: Mapping[str, np.ndarray], path: Path) -> Path:
    """MP@K against K, one line per system."""
    plt, fig, ax = _figure()
    for name, curve in curves.items():
        ax.plot(np.arange(1, len(curve) + 1), curve, marker=".", label=name)
    ax.set(xlabel="K", ylabel="MP@K", title="Mean precision in the top K")
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_precision_recall(curves: Mapping[str, np.ndarray], path: Path) -> Path:
    """11-point interpolated precision-recall curves."""
    plt, fig, ax = _figure()
    levels = np.linspace(0, 1, 11)
    for name, curve in curves.items():
        ax.plot(levels, curve, marker=".", label=name)
    ax.set(xlabel="recall", ylabel="interpolated precision", title="Precision-recall", xlim=(0, 1), ylim=(0, 1.02))
    ax.legend(fontsize=7)
    return _save(plt, fig, path)


def plot_per_class(per_class: Mapping[str, Mapping[str, float]], k: int, path: Path) -> Path:
    """Grouped horizontal bars of P@k per query class, one colour per system."""
    plt, fig, ax = _figure()
    classes = sorted({c for values in per_class.values() for c in values})
    height = 0.8 / max(len(per_class), 1)
    fig.set_size_inches(FIGSIZE[0], max(FIGSIZE[1], 0.22 * len(classes) * max(1, len(per_class) // 2)))
    for i, (name, values) in enumerate(per_class.items()):
        ax.barh(np.arange(len(classes)) + i * height, [values.get(c, 0.0) for c in classes], height=height, label=name)
    ax.set_yticks(np.arange(len(classes)) + 0.4 - height / 2, classes, fontsize=6)
    ax.set(xlabel=f"P@{k}", title=f"P@{k} per class", xlim=(0, 1))
    ax.legend(fontsize=6)
    return _save(plt, fig, path)


def plot_tsne(vectors: np.ndarray, labels: Sequence[str], path: Path, seed: int = 0) -> Path:
    """2-d t-SNE of embeddings, points coloured by class (scikit-learn)."""
    from sklearn.manifold import TSNE

    vectors = np.asarray(vectors, dtype=np.float32)
    perplexity = float(min(30.0, max(2.0, (len(vectors) - 1) / 3)))
    points = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(vectors)
    plt, fig, ax = _figure()
    classes = sorted(set(labels))
    cmap = plt.get_cmap("tab20", max(len(classes), 1))
    label_array = np.asarray(labels)
    for i, label in enumerate(classes):
        mask = label_array == label
        ax.scatter(points[mask, 0], points[mask, 1], s=8, color=cmap(i), label=label)
    ax.set(title="t-SNE of embeddings", xticks=[], yticks=[])
    if len(classes) <= 12:
        ax.legend(fontsize=6, markerscale=1.5)
    return _save(plt, fig, path)


def plot_confidence(traces: Mapping[str, Sequence[tuple[int, float, float]]], path: Path, target: float = 0.95) -> Path:
    """Confidence in the ranking (solid) and accuracy (dotted) against judgments made."""
    plt, fig, ax = _figure()
    for i, (name, trace) in enumerate(traces.items()):
        n, confidence, accuracy = (np.array(column) for column in zip(*trace))
        colour = f"C{i}"
        ax.plot(n, confidence, color=colour, label=f"{name} confidence")
        ax.plot(n, accuracy, color=colour, linestyle=":", label=f"{name} accuracy")
    ax.axhline(target, color="grey", linewidth=0.8, linestyle="--")
    ax.set(xlabel="judgments made", ylabel="mean confidence / accuracy", title="MTC: confidence vs judgments", ylim=(0, 1.02))
    ax.legend(fontsize=6)
    return _save(plt, fig, path)


# ---------------------------------------------------------------- document


@dataclass
class Report:
    """Contents of a report: a title, a metrics table and captioned images."""

    title: str
    table: dict[str, dict[str, float]]  # system -> metric -> value
    images: list[tuple[str, Path]] = field(default_factory=list)  # (caption, png path)
    notes: list[str] = field(default_factory=list)


def write_report(report: Report, out_dir: Path, fmt: str = "html") -> Path:
    """Write ``index.html`` or ``index.md`` in ``out_dir`` next to the PNGs (linked relatively)."""
    metrics = list(next(iter(report.table.values()), {}))
    if fmt == "md":
        lines = [f"# {report.title}", "", "| system | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
        lines += [f"| {name} | " + " | ".join(f"{row[m]:.4f}" for m in metrics) + " |" for name, row in report.table.items()]
        lines += [""] + [f"- {note}" for note in report.notes] + [""]
        for caption, image in report.images:
            lines += [f"## {caption}", "", f"![{caption}]({image.name})", ""]
        path = out_dir / "index.md"
        path.write_text("\n".join(lines))
        return path
    if fmt != "html":
        raise ValueError(f"unknown report format {fmt!r}; use html or md")
    esc = html.escape
    head = "".join(f"<th>{esc(m)}</th>" for m in metrics)
    rows = "".join(
        f"<tr><td>{esc(name)}</td>" + "".join(f"<td>{row[m]:.4f}</td>" for m in metrics) + "</tr>" for name, row in report.table.items()
    )
    notes = "".join(f"<li>{esc(note)}</li>" for note in report.notes)
    figures = "".join(
        f'<figure><img src="{esc(image.name)}" alt="{esc(caption)}"><figcaption>{esc(caption)}</figcaption></figure>'
        for caption, image in report.images
    )
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(report.title)}</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}figure{display:inline-block}</style>"
        f"</head><body><h1>{esc(report.title)}</h1><table><tr><th>system</th>{head}</tr>{rows}</table>"
        f"<ul>{notes}</ul>{figures}</body></html>"
    )
    path = out_dir / "index.html"
    path.write_text(page)
    return path
