"""Issue 35's rule for MiniLM with fewer layers: the first L of its 6 layers and a linear map to the full vector.

A text query's MiniLM forward is most of its server time (README, Numbers). This bench tries the cheapest
change that shortens it: run only the first ``L`` layers (onnxruntime, the default ``int8_token`` products),
mean-pool and normalise their output as the library pools the last layer's, and map that vector to the
six-layer one with an affine map fitted by least squares, then normalise again. In one run:

* ``fit``: the map of each L, fitted on training-side sentences only: the captions of the scenes the
  image-text recipe trained on (``app/training/synthesis/images.py``, the checkpoint's ``train.seed`` and
  ``n_scenes``; its validation scenes, the dev set, use seed + 10,000) and of the COCO photos it trained on
  (``--photos`` minus the checkpoint's ``held_out_files``); never a dev caption. Inputs and targets are
  the library model's float32 vectors (``output_hidden_states``); the fit's own cosine to the target on
  those sentences is reported beside the dev sets' (which the fit never saw);
* ``quality``: ``bench.service.text_quality.compare`` of the default encoder (int8_token, six layers)
  against the same encoder whose MiniLM runs L layers and the map: R@10 on both dev sets, stage 1 and
  re-ranked, the drop and the top-10 overlap, and whether the rule holds;
* ``in_process``: one new sentence through MiniLM as a query runs it (``Int8MiniLM.__call__``, the lone
  query's path), six layers and each L taking turns, and the sentence vector's cosine to the six-layer one.

    python -m bench.service.text_layers [--layers 4,5] [--out bench/results/text_layers.json]

Needs the ``onnx`` development package (the L-layer graphs are exported to a temporary folder).
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from app.encoders.image_text.text_features import DEFAULT_QUERY_PRECISION
from bench.output import write_results
from bench.service.text_quality import DEFAULT_PHOTOS, compare, dev_sets, encoder_with_precision

RESULTS = Path(__file__).resolve().parents[1] / "results"
OUT = RESULTS / "text_layers.json"
PRECISION = DEFAULT_QUERY_PRECISION  # the unchanged system (int8_token when text_layers.json was measured)
TIMED_SENTENCES = 300


def training_sentences(encoder: Any, photos_dir: Path | None) -> dict[str, list[str]]:
    """The captions the image-text recipe trained on: its generated scenes and its COCO training photos."""
    from app.training.image_text.data import read_records
    from app.training.synthesis.images import generate_scenes

    train = encoder.config["train"]
    scenes = generate_scenes(int(train["n_scenes"]), seed=int(train["seed"]))
    out = {"scenes": sorted({c for s in scenes for c in s.captions})}
    if photos_dir is not None and (photos_dir / "captions.jsonl").is_file():
        held = set(encoder.config["held_out_files"])
        out["photos"] = sorted({c for r in read_records(photos_dir) if r["file"] not in held for c in r["captions"]})
    return out


def pooled_by_layer(sentence_model: Any, texts: list[str], batch: int = 256) -> dict[int, np.ndarray]:
    """layer (1..6) -> (n, 384) unit-length mean-pooled float32 outputs of the library's model."""
    import torch
    import torch.nn.functional as F

    transformer = sentence_model[0]
    bert, tokenizer = transformer.auto_model, transformer.tokenizer
    out: dict[int, list[np.ndarray]] = {}
    for start in range(0, len(texts), batch):
        features = tokenizer(texts[start:start + batch], padding=True, truncation=True,
                             max_length=int(transformer.max_seq_length), return_tensors="pt")
        with torch.inference_mode():
            states = bert(**features, output_hidden_states=True).hidden_states
        weights = features["attention_mask"].float().unsqueeze(-1)
        for layer in range(1, len(states)):
            pooled = (states[layer] * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            out.setdefault(layer, []).append(F.normalize(pooled, dim=1).numpy())
    return {layer: np.concatenate(parts) for layer, parts in out.items()}


def fit_map(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(dim + 1, dim) affine map by least squares: ``[x, 1] @ map ~= y``."""
    design = np.c_[x, np.ones(len(x))].astype(np.float64)
    solution, *_ = np.linalg.lstsq(design, y.astype(np.float64), rcond=None)
    return solution


def apply_map(mapping: np.ndarray, x: np.ndarray) -> np.ndarray:
    y = x.astype(np.float64) @ mapping[:-1] + mapping[-1]
    return (y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)).astype(np.float32)


def first_layers(bert: Any, layers: int) -> Any:
    """A stand-in for ``bert`` with only its first ``layers`` layers, as minilm_int8's exporter and session read it."""
    config = copy.copy(bert.config)
    config.num_hidden_layers = layers
    return SimpleNamespace(config=config, encoder=SimpleNamespace(layer=bert.encoder.layer[:layers]),
                           embeddings=bert.embeddings)


class TruncatedFeatures:
    """MiniLM text features from its first L layers (onnxruntime, the served lone-query path) and the map."""

    kind = "minilm"
    dim = 384

    def __init__(self, sentence_model: Any, layers: int, mapping: np.ndarray, folder: Path) -> None:
        from app.encoders.image_text.minilm_int8 import Int8MiniLM, _session, write_graph

        bert = first_layers(sentence_model[0].auto_model, layers)
        graph = folder / f"minilm_{PRECISION}_{layers}_layers.onnx"
        write_graph(bert, graph, PRECISION)
        self.forward = Int8MiniLM(sentence_model, variant=PRECISION)  # six layers; its sessions replaced below
        self.forward.session = _session(bert, graph, PRECISION)
        self.forward.lone_session = _session(bert, graph, PRECISION, threads=2)
        self.mapping = mapping
        self.layers = layers

    def __call__(self, texts: list[str]) -> np.ndarray:
        return apply_map(self.mapping, self.forward(list(texts)).numpy())

    def config(self) -> dict[str, Any]:
        return {"kind": self.kind, "dim": self.dim}


def in_process(forwards: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """Median ms of one new sentence per forward, taking turns (the order rotating), and cosines to the first."""
    names = list(forwards)
    times: dict[str, list[float]] = {name: [] for name in names}
    vectors: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for i, text in enumerate(texts):
        for name in names[i % len(names):] + names[:i % len(names)]:
            started = time.perf_counter()
            vector = forwards[name]([text])
            times[name].append((time.perf_counter() - started) * 1000)
            vectors[name].append(np.asarray(vector)[0])
    reference = np.stack(vectors[names[0]])
    return {name: {"p50_ms": statistics.median(times[name]), "p90_ms": float(np.percentile(times[name], 90)),
                   "cosine_to_six_layers_mean": float((np.stack(vectors[name]) * reference).sum(1).mean()),
                   "cosine_to_six_layers_min": float((np.stack(vectors[name]) * reference).sum(1).min())}
            for name in names}


def run(layer_counts: list[int], photos_dir: Path | None) -> dict[str, Any]:
    import torch

    from app.encoders.runtime import limit_numpy_blas

    torch.set_num_threads(1)  # as the service's query batches run
    limit_numpy_blas(1)  # and its numpy products (the map's)
    unchanged = encoder_with_precision(PRECISION)
    sentence_model = unchanged.text_features._load()
    sets = dev_sets(unchanged, photos_dir)
    training = training_sentences(unchanged, photos_dir)
    fit_texts = [t for part in training.values() for t in part]
    dev_texts = {name: texts for name, (_, texts, _) in sets.items()}
    started = time.perf_counter()
    fit_pooled = pooled_by_layer(sentence_model, fit_texts)
    dev_pooled = {name: pooled_by_layer(sentence_model, texts) for name, texts in dev_texts.items()}
    out: dict[str, Any] = {"unchanged": f"{PRECISION}, 6 layers", "fit_sentences": {k: len(v) for k, v in training.items()},
                           "dev_captions_in_fit": {name: float(np.mean([t in set(fit_texts) for t in texts]))
                                                   for name, texts in dev_texts.items()},
                           "embedding_s": time.perf_counter() - started, "variants": {}}
    forwards: dict[str, Any] = {"6": lambda texts: unchanged.text_features(texts)}
    with tempfile.TemporaryDirectory() as folder:
        for layers in layer_counts:
            mapping = fit_map(fit_pooled[layers], fit_pooled[6])

            def cosine(pooled: dict[int, np.ndarray]) -> dict[str, float]:
                c = (apply_map(mapping, pooled[layers]) * pooled[6]).sum(1)
                raw = (pooled[layers] * pooled[6]).sum(1)
                return {"mapped_mean": float(c.mean()), "mapped_min": float(c.min()), "unmapped_mean": float(raw.mean())}

            features = TruncatedFeatures(sentence_model, layers, mapping, Path(folder))
            changed = encoder_with_precision(PRECISION)
            changed.text_features = features
            out["variants"][str(layers)] = {
                "layers": layers, "float32_cosine_to_six_layers": {"fit": cosine(fit_pooled),
                                                                   **{n: cosine(p) for n, p in dev_pooled.items()}},
                "quality": compare(unchanged, changed, sets)}
            forwards[str(layers)] = features
            print(json.dumps({layers: out["variants"][str(layers)]["quality"]["rule_met"]}), flush=True)
        timed = training["scenes"][:TIMED_SENTENCES]  # distinct sentences; no forward caches
        out["in_process"] = in_process(forwards, timed)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default="4,5", help="comma-separated layer counts to try (1-5)")
    parser.add_argument("--photos", type=Path, default=DEFAULT_PHOTOS)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    result = run([int(x) for x in args.layers.split(",")], args.photos)
    write_results(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
