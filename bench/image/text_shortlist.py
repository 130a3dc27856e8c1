"""Issue 35's rule for an image collection's shortlist: the dev sets' images among 10^4 generated distractors.

A re-ranked text query asks the search for the head's top 100 (``rerank_top``). The first round scanned
4 segments per wanted item (an audio item has many windows), so two-stage search shortlisted 4 x 100 x 10
(oversample) = 4,000 codes by Hamming distance and read their float rows; an image is one segment, so
app/search/depth.py now scans 1 per item in a collection of up to ``SHALLOW_IMAGES``: 1,000 codes and rows. That changes answers only where an image the
exact cosine would rank in the top 100 sits beyond the shorter Hamming shortlist, which the text-to-image dev
sets (``bench.service.text_quality``: 40 and 300 images) cannot show, as any shortlist covers them whole.
So each dev set's images are put among ``--distractors`` generated scenes (``app/training/synthesis/images.py``,
seed 30,000: disjoint from training's 0 and validation's 10,000) in a real collection (catalog, two-shard binary
and float indices), and every caption is searched through ``app.search.pipeline`` as the service searches
(the default encoder and query precision, each caption embedded alone), with each first-round depth:

* ``rerank``: k = 100, two-stage, then the relevance head over those 100 (ordered as app/usecases/query.py
  orders them: score, then item id), top 10 (the service's default text query);
* ``stage1``: k = 10, two-stage, no re-rank (``"rerank": false``).

Per dev set and kind: R@10 (the caption's own image in the top 10) at 4 and 1 segments per item and of the
exact ranking (every image's cosine, no shortlist), the drop, the top-10 overlap with 4, whether the rule
holds, the rows read, and the median in-process search time (``pipeline._search_here`` on one
thread: shortlist, float rows, exact cosines, catalog reads; the head not counted), depths taking turns.

    python -m bench.image.text_shortlist [--distractors 10000] [--out bench/results/text_shortlist.json]

``default_depth_per_item``: what app/search/depth.py picks for a collection of that size (1 up to
``SHALLOW_IMAGES``, 4 beyond: among 10^5 images the shorter shortlist missed the rule).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.output import write_results
from bench.service.text_quality import DEFAULT_PHOTOS, MAX_R10_DROP, MIN_OVERLAP, dev_sets, encoder_with_precision

RESULTS = Path(__file__).resolve().parents[1] / "results"
OUT = RESULTS / "text_shortlist.json"
DISTRACTOR_SEED = 30_000
DEPTHS = (4, 1)  # segments a first round scans per wanted item: before, now (app/search/depth.py)
RERANK_TOP, K, OVERSAMPLE = 100, 10, 10  # the service's defaults


def distractors(encoder: Any, n: int, cache: Path | None = None) -> np.ndarray:
    """(n, dim) float embeddings of generated scenes no training or dev set holds (kept in ``cache``, a folder:
    10^5 of them take ~9 minutes on two shared cores)."""
    from app.training.synthesis.images import generate_scenes, render

    path = cache / f"distractors_{encoder.name}_{DISTRACTOR_SEED}_{n}.npy" if cache else None
    if path is not None and path.is_file():
        return np.load(path)
    scenes = generate_scenes(n, seed=DISTRACTOR_SEED)
    floats = np.concatenate([encoder.encode([render(s) for s in scenes[i:i + 256]]).floats for i in range(0, n, 256)])
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, floats)
    return floats


def collection(root: Path, floats: np.ndarray) -> tuple[Any, Any, Any]:
    """Collection "img" of one image per row (item ids ``i<row>``), binary and float indices in two shards."""
    from app.encoders.base import sign_codes
    from app.storage.catalog import Catalog, Collection, NewItem
    from app.storage.index_store import CollectionIndex

    codes = sign_codes(floats)
    catalog = Catalog(root / "c.db")
    described = Collection("img", "image", "bench", ("binary", "float"), floats.shape[1], codes.shape[1] * 8,
                           None, None, False, "", 0.0)
    catalog.create_collection(described)
    for start in range(0, len(floats), 5000):
        catalog.upsert_items("img", [NewItem(f"i{i}", None, None, None, {}, np.zeros((1, 2)), floats[i:i + 1], codes[i:i + 1])
                                     for i in range(start, min(len(floats), start + 5000))])
    return catalog, described, CollectionIndex.open(described, catalog, root, shards=2)


def top10(encoder: Any, catalog: Any, described: Any, index: Any, text: str, floats: np.ndarray, codes: np.ndarray,
          depth_per_item: int, rerank: bool) -> tuple[list[int], float]:
    """The rows of the top 10 the service would answer, and the search's ms (the head's not counted)."""
    from app.search import pipeline
    from app.search.pipeline import Query, SearchOptions

    options = SearchOptions(k=RERANK_TOP if rerank else K, mode="two_stage", oversample=OVERSAMPLE,
                            depth_per_item=depth_per_item)
    started = time.perf_counter()
    hits = pipeline._search_here(catalog, described, index, Query(floats=floats, codes=codes, text=text), options, False)
    search_ms = (time.perf_counter() - started) * 1000
    if rerank:
        scores = encoder.rerank(text, np.stack([h.vector for h in hits]))
        hits = [h for _, h in sorted(zip(scores.tolist(), hits), key=lambda pair: (-pair[0], pair[1].item_id))]
    return [int(h.item_id[1:]) for h in hits[:K]], search_ms


def exact_top10(encoder: Any, text: str, query: np.ndarray, images: np.ndarray, rerank: bool) -> list[int]:
    """The same without a shortlist: every image's cosine, ties by row (item ids are rows)."""
    order = np.argsort(-(images @ query[0]), kind="stable")[: RERANK_TOP if rerank else K]
    if rerank:
        scores = encoder.rerank(text, images[order])
        order = order[np.lexsort((np.asarray([f"i{r}" for r in order]), -scores))]  # as the service: score, then item id
    return order[:K].tolist()


def measure(encoder: Any, images: np.ndarray, texts: list[str], owners: np.ndarray, distractor_floats: np.ndarray) -> dict[str, Any]:
    from app.search.depth import per_item
    from app.search.pipeline import SearchOptions
    from bench.service.text_quality import recall_at_10, top10_overlap

    floats = np.concatenate([images, distractor_floats])
    queries = encoder.encode_text(texts)  # each text its own MiniLM call (onnxruntime precisions), as served
    with tempfile.TemporaryDirectory() as folder:
        catalog, described, index = collection(Path(folder), floats)
        out: dict[str, Any] = {"images": len(images), "distractors": len(distractor_floats), "queries": len(texts),
                               "default_depth_per_item": per_item(described, SearchOptions(), len(floats))}
        for kind, rerank in (("rerank", True), ("stage1", False)):
            rows: dict[int, list[list[int]]] = {d: [] for d in DEPTHS}
            ms: dict[int, list[float]] = {d: [] for d in DEPTHS}
            for q, t in enumerate(texts):
                for d in (DEPTHS if q % 2 else DEPTHS[::-1]):  # taking turns, the order alternating
                    top, took = top10(encoder, catalog, described, index, t, queries.floats[q:q + 1], queries.codes[q:q + 1], d, rerank)
                    rows[d].append(top)
                    ms[d].append(took)
            ranked = {d: np.asarray(rows[d]) for d in DEPTHS}
            exact = np.asarray([exact_top10(encoder, t, queries.floats[q:q + 1], floats, rerank) for q, t in enumerate(texts)])
            wanted = RERANK_TOP if rerank else K
            before, after = recall_at_10(ranked[DEPTHS[0]], owners), recall_at_10(ranked[DEPTHS[1]], owners)
            overlap = top10_overlap(ranked[DEPTHS[0]], ranked[DEPTHS[1]])
            out[kind] = {"shortlist_rows": {str(d): min(len(floats), max(wanted * d, 32) * OVERSAMPLE) for d in DEPTHS},
                         "R@10_exact": recall_at_10(exact, owners), "R@10_unchanged": before, "R@10_changed": after,
                         "R@10_drop": before - after, "top10_overlap": overlap,
                         "top10_overlap_with_exact": {str(d): top10_overlap(exact, ranked[d]) for d in DEPTHS},
                         "search_ms_p50": {str(d): float(np.median(ms[d])) for d in DEPTHS},
                         "rule_met": bool(before - after <= MAX_R10_DROP + 1e-12 and overlap >= MIN_OVERLAP)}
        catalog.close()
    return out


def run(n_distractors: int, photos_dir: Path | None, cache: Path | None = None) -> dict[str, Any]:
    import torch

    from app.encoders.runtime import limit_numpy_blas

    torch.set_num_threads(1)
    limit_numpy_blas(1)  # as the service runs a query's numpy products (app/encoders/runtime.py)
    from app.encoders.image_text.text_features import DEFAULT_QUERY_PRECISION

    encoder = encoder_with_precision(DEFAULT_QUERY_PRECISION)  # int8_token when text_shortlist*.json were measured
    started = time.perf_counter()
    sets = dev_sets(encoder, photos_dir)
    extra = distractors(encoder, n_distractors, cache)
    out: dict[str, Any] = {"encoder": encoder.name, "query_precision": DEFAULT_QUERY_PRECISION, "depth_per_item": list(DEPTHS),
                           "rule": {"max_R@10_drop": MAX_R10_DROP, "min_top10_overlap": MIN_OVERLAP},
                           "distractor_seed": DISTRACTOR_SEED, "embedding_s": time.perf_counter() - started}
    for name, (images, texts, owners) in sets.items():
        out[name] = measure(encoder, images, texts, owners, extra)
        print(json.dumps({name: {k: out[name][k]["rule_met"] for k in ("rerank", "stage1")}}), flush=True)
    out["rule_met"] = all(out[name][kind]["rule_met"] for name in sets for kind in ("rerank", "stage1"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distractors", type=int, default=10_000)
    parser.add_argument("--photos", type=Path, default=DEFAULT_PHOTOS)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-distractors",
                        help="folder keeping the distractors' embeddings between runs")
    args = parser.parse_args(argv)
    result = run(args.distractors, args.photos, args.cache)
    write_results(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
