"""How well post-hoc binary codes (PCA + ITQ) stand in for a trained hash head: Hamming and two-stage
search against exact float search.

    python -m bench.encoders.onnx_codes [--out bench/results/onnx_codes.json] [--encoder general-audio]

A foreign (ONNX) encoder has no hash head, so its collections fit codes on their first ingest
(app/encoders/onnx_folder/itq.py). No real foreign model installs here, so a shipped encoder's float
embeddings of real media stand in for one: the demo's sound and word clips cut into the service's
windows (a 512-d float per window from the default audio encoder). Its own trained codes are the built-in
reference; the post-hoc codes are fitted on the first half of the windows (the "first ingest") and
every window of both halves is a query against all the others. Compared at the same width:

* ``trained``: the encoder's own codes (its hash head, at its own width);
* ``itq``: PCA + ITQ, what a foreign encoder's collection gets;
* ``pca``: PCA signs without the rotation;
* ``lsh``: signs of a random projection (no fit at all).

Reported: recall@10 of Hamming search (its top 10 against the float top 10) and of two-stage search
(a Hamming shortlist of 10 x oversample re-scored by exact cosine, oversample 2 and 10), as the
built-in encoders report Hamming against float.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

import numpy as np

from app.encoders.base import pack_bits
from app.encoders.onnx_folder.itq import fit_itq
from app.encoders.registry import create_encoder, discover
from app.features.windows import cut_audible_windows
from app.media.audio import decode_audio

DEMO = Path(__file__).resolve().parents[2] / "app" / "assets" / "demo"
K = 10
OVERSAMPLES = (2, 10)  # the demo has a few hundred windows: a shortlist of 100 is a third of them


def demo_windows(encoder: Any) -> tuple[np.ndarray, np.ndarray]:
    """Float embeddings and the encoder's own codes of every audible window of the demo's audio clips."""
    rows = [json.loads(line) for line in (DEMO / "manifest.jsonl").read_text().splitlines() if line.strip()]
    windows: list[np.ndarray] = []
    for row in rows:
        if not row["file"].startswith(("sounds/", "words/")):
            continue
        wave = decode_audio((DEMO / row["file"]).read_bytes(), target_rate=encoder.sample_rate, filename=row["file"])
        cut, _ = cut_audible_windows(wave, encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s)
        windows += cut
    floats, codes = [], []
    for start in range(0, len(windows), 64):
        emb = encoder.encode(windows[start:start + 64])
        floats.append(emb.floats)
        codes.append(emb.codes)
    return np.concatenate(floats), np.concatenate(codes)


def hamming(codes: np.ndarray) -> np.ndarray:
    bits = np.unpackbits(codes, axis=1, bitorder="little").astype(np.float32)
    return bits @ (1 - bits).T + (1 - bits) @ bits.T  # (n, n) Hamming distances


def recalls(floats: np.ndarray, codes: np.ndarray, rng: np.random.Generator) -> dict[str, float]:
    n = len(floats)
    cosine = floats @ floats.T
    np.fill_diagonal(cosine, -np.inf)
    truth = np.argsort(-cosine, axis=1)[:, :K]
    dist = hamming(codes) + rng.uniform(0, 1e-3, (n, n))  # random tie-break, as an index would break ties arbitrarily
    np.fill_diagonal(dist, np.inf)
    order = np.argsort(dist, axis=1)
    hit = lambda found: float(np.mean([len(set(f) & set(t)) / K for f, t in zip(found, truth)]))  # noqa: E731
    out = {"binary_recall_at_10": round(hit(order[:, :K]), 4)}
    for oversample in OVERSAMPLES:
        shortlist = order[:, : K * oversample]
        rescored = np.take_along_axis(shortlist, np.argsort(-np.take_along_axis(cosine, shortlist, 1), axis=1)[:, :K], 1)
        out[f"two_stage_x{oversample}_recall_at_10"] = round(hit(rescored), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="bench/results/onnx_codes.json")
    parser.add_argument("--encoder", default="general-audio", help="a shipped audio encoder whose floats stand in")
    parser.add_argument("--bits", type=int, default=256, help="post-hoc code width (a foreign encoder's default: min(dim, 256))")
    args = parser.parse_args(argv)
    encoder = create_encoder(args.encoder, discover())
    floats, trained = demo_windows(encoder)
    bits = args.bits
    if bits > floats.shape[1]:
        raise SystemExit(f"{args.encoder}: {bits} bits over {floats.shape[1]} dimensions; PCA cannot give that many")
    rng = np.random.default_rng(0)
    first = floats[: len(floats) // 2]
    schemes = {
        f"trained_{encoder.bits}_bits": trained,
        "itq": fit_itq(first, bits).codes(floats),
        "pca": fit_itq(first, bits, iterations=0).codes(floats),
        "lsh": pack_bits(floats @ rng.standard_normal((floats.shape[1], bits)) > 0),
    }
    results = {name: recalls(floats, codes, rng) for name, codes in schemes.items()}
    report = {"encoder": args.encoder, "version": encoder.version, "windows": int(len(floats)), "fit_on": int(len(first)),
              "dim": int(floats.shape[1]), "bits": int(bits), "k": K, "results": results,
              "machine": platform.platform()}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for name, row in results.items():
        print(f"{name:18s}", "  ".join(f"{key} {value:.3f}" for key, value in row.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
