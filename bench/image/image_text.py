"""Text-to-image speed: query embedding, stage-1 search and re-ranking at 10^5 images, ingest.

Writes bench/results/image_text.json. Parts, all on CPU in one run:

* ``encoder``: the image-text encoder alone. Text-query embedding (MiniLM + text tower) latency;
  relevance-head re-ranking of R = 100 stored embeddings; image ingest throughput (decode-free
  ``encode``) at batch 32 and batch 1.
* ``http``: the service end to end through ``TestClient`` (no network): a collection of 10^5
  images whose embeddings are real ones (300 generated scenes ingested over HTTP) tiled with small
  noise and written straight into the catalog -- encoding 10^5 images would take an hour and
  does not change search cost. The service is then restarted so it rebuilds its indices from
  the catalog, and text searches are timed with and without re-ranking.

    python -m bench.image.image_text [--items 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ENCODER = "image-text-minilm"
OUT = Path(__file__).resolve().parents[1] / "results" / "image_text.json"


def _percentiles(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(np.mean(ms)), "n": len(ms)}


def _queries(n: int) -> list[str]:
    """Distinct caption-like queries, so no run hits a warm per-query cache."""
    from app.training.synthesis.images import generate_scenes

    texts = [c for s in generate_scenes(n, seed=4242) for c in s.captions]
    return list(dict.fromkeys(texts))[:n]


def bench_encoder(queries: list[str]) -> dict:
    import torch

    from app.encoders import registry
    from app.training.synthesis.images import generate_scenes, render

    torch.set_num_threads(2)
    t = time.perf_counter()
    encoder = registry.create_encoder(ENCODER, registry.discover())
    encoder.encode_text(["warm up"])  # MiniLM loads lazily
    load_s = time.perf_counter() - t

    text_ms = []
    for q in queries:
        t = time.perf_counter()
        encoder.encode_text([q])
        text_ms.append((time.perf_counter() - t) * 1000)

    rng = np.random.default_rng(0)
    candidates = rng.standard_normal((100, encoder.dim)).astype(np.float32)
    candidates /= np.linalg.norm(candidates, axis=1, keepdims=True)
    rerank_ms = []
    for q in queries:
        encoder.encode_text([q])  # the service embeds the query for stage 1 first
        t = time.perf_counter()
        encoder.rerank(q, candidates)
        rerank_ms.append((time.perf_counter() - t) * 1000)
    cold_rerank_ms = []
    for q in queries[: len(queries) // 2]:
        encoder._text_cache.clear()  # what re-ranking costs when the query must be embedded again
        t = time.perf_counter()
        encoder.rerank(q, candidates)
        cold_rerank_ms.append((time.perf_counter() - t) * 1000)

    # photo-sized inputs, so ingest pays for the resize like real uploads do
    images = [_photo_sized(render(s)) for s in generate_scenes(64, seed=5)]
    ingest = {}
    for batch in (32, 1):
        encoder.encode(images[:batch])  # warm-up
        t = time.perf_counter()
        done = 0
        while time.perf_counter() - t < 10.0:
            encoder.encode(images[:batch])
            done += batch
        ingest[f"batch_{batch}_images_per_s"] = done / (time.perf_counter() - t)
    return {
        "load_seconds": load_s,
        "text_query_embed": _percentiles(text_ms),
        "rerank_R100_query_cached": _percentiles(rerank_ms),
        "rerank_R100_query_recomputed": _percentiles(cold_rerank_ms),
        "ingest_encode_640x480": ingest,
    }


def _photo_sized(scene: np.ndarray) -> np.ndarray:
    """A 256x256 scene blown up to 640x480, the size of a typical upload."""
    return np.ascontiguousarray(np.kron(scene, np.ones((3, 3, 1), np.uint8))[:480, :640])


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def bench_http(n_items: int, queries: list[str], n_real: int = 300) -> dict:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings
    from app.storage.catalog import Catalog, NewItem
    from app.training.synthesis.images import generate_scenes, render

    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(data_dir=Path(tmp), keep_media=False, limits={"max_upload_bytes": 1 << 30, "sync_ingest_files": 32},
                            encoders={"default_image": ENCODER})
        scenes = generate_scenes(n_real, seed=77)
        with TestClient(create_app(settings)) as client:
            r = client.post("/v1/collections", json={"name": "img", "modality": "image", "encoder": ENCODER})
            assert r.status_code in (200, 201), r.text
            files = [("files", (f"s{i}.png", _png(_photo_sized(render(s))))) for i, s in enumerate(scenes)]
            t = time.perf_counter()
            for start in range(0, len(files), 32):
                r = client.post("/v1/collections/img/items", files=files[start:start + 32])
                assert r.status_code == 200, r.text  # synchronous: committed when it answers
            http_ingest = len(files) / (time.perf_counter() - t)

        catalog = Catalog(Path(tmp) / "catalog.sqlite3")
        collection = catalog.get_collection("img")
        real = np.stack([catalog.item_segments("img", f"s{i}.png", collection.dim, collection.bits)[2][0]
                         for i in range(n_real)])
        rng = np.random.default_rng(0)
        from app.encoders.base import sign_codes

        for start in range(n_real, n_items, 10_000):
            count = min(10_000, n_items - start)
            floats = real[rng.integers(0, n_real, count)] + 0.05 * rng.standard_normal((count, collection.dim))
            floats = (floats / np.linalg.norm(floats, axis=1, keepdims=True)).astype(np.float32)
            codes = sign_codes(floats)
            items = [NewItem(id=f"t{start + j}", filename=None, media_type=None, media_path=None, metadata={},
                             times=np.zeros((1, 2), np.float32), floats=floats[j:j + 1], codes=codes[j:j + 1])
                     for j in range(count)]
            catalog.upsert_items("img", items)
        catalog.close()

        results: dict = {"items": n_items, "http_ingest_640x480_png_images_per_s_batch32": http_ingest}
        with TestClient(create_app(settings)) as client:
            for label, body in (("text_search_rerank_R100", {"rerank": True, "rerank_top": 100}),
                                ("text_search_stage1_only", {"rerank": False})):
                for q in queries[:5]:  # warm-up
                    client.post("/v1/collections/img/search", json={"text": q, "k": 10, **body})
                ms, server = [], {}
                for q in queries:
                    t = time.perf_counter()
                    r = client.post("/v1/collections/img/search", json={"text": f"{q} ({label})", "k": 10, **body})
                    ms.append((time.perf_counter() - t) * 1000)
                    assert r.status_code == 200, r.text
                    for key, value in r.json()["timings"].items():
                        server.setdefault(key, []).append(value)
                results[label] = {**_percentiles(ms),
                                  "server_timings_p50_ms": {k: float(np.percentile(v, 50)) for k, v in server.items()}}
        return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--skip-http", action="store_true")
    args = parser.parse_args(argv)
    queries = _queries(args.queries)
    result = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch_threads": 2,
                    "note": "shared 2-core machine; other jobs were running, so treat as upper bounds"},
        "encoder": ENCODER,
        "encoder_only": bench_encoder(queries),
    }
    if not args.skip_http:
        result["http"] = bench_http(args.items, queries)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
