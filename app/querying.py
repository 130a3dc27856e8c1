"""A search request -> query vectors -> ranked results, with timings per stage."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from app.api.schemas import SearchRequest
from app.errors import InvalidInput
from app.features.windows import cut_windows
from app.ingest import Upload, decode_media
from app.search.pipeline import Query, SearchOptions, search, to_results
from app.search.ranking import ItemHit
from app.services import CollectionState, Services


async def build_query(services: Services, state: CollectionState, params: SearchRequest, upload: Upload | None, timings: dict[str, float]) -> Query:
    """Vectors for the one query source given: an example file, a stored item, or a text."""
    collection = state.collection
    sources = [s for s in (upload is not None, params.item_id is not None, params.text is not None) if s]
    if len(sources) != 1:
        raise InvalidInput("give exactly one query: a 'file' part (or content_base64), an 'item_id', or a 'text'")
    if params.item_id is not None:
        services.catalog.get_item(collection.name, params.item_id)  # 404 when absent
        _, _, floats, codes = await asyncio.to_thread(
            services.catalog.item_segments, collection.name, params.item_id, collection.dim, collection.bits
        )
        return Query(floats=floats.copy(), codes=codes.copy(), exclude_item=params.item_id)
    if params.text is not None:
        if collection.modality != "image":
            raise InvalidInput(f"text queries search image collections; {collection.name!r} holds audio")
        t = time.perf_counter()
        emb = await services.encoders.encode_text(collection.encoder, [params.text])
        timings["encode_ms"] = (time.perf_counter() - t) * 1000
        return Query(floats=emb.floats, codes=emb.codes, text=params.text)
    assert upload is not None
    encoder = await services.encoders.load(collection.encoder)
    t = time.perf_counter()
    media = await decode_media(services, collection.modality, upload, sample_rate=encoder.sample_rate, query=True)
    timings["decode_ms"] = (time.perf_counter() - t) * 1000
    if collection.modality == "audio":
        assert encoder.sample_rate and collection.window_s and collection.hop_s
        inputs, _ = cut_windows(media, encoder.sample_rate, collection.window_s, collection.hop_s)
    else:
        inputs = [media]
    t = time.perf_counter()
    emb = await services.encoders.encode(collection.encoder, inputs)
    timings["encode_ms"] = (time.perf_counter() - t) * 1000
    return Query(floats=emb.floats, codes=emb.codes)


async def run_search(services: Services, name: str, params: SearchRequest, upload: Upload | None) -> dict[str, Any]:
    started = time.perf_counter()
    state = services.state(name)
    if params.k > services.settings.limits.max_k:
        raise InvalidInput(f"k must be between 1 and {services.settings.limits.max_k}, got {params.k}")
    timings: dict[str, float] = {}
    query = await build_query(services, state, params, upload, timings)
    rerank = params.text is not None and params.rerank and (await services.encoders.load(state.collection.encoder)).supports_rerank
    options = SearchOptions(
        k=max(params.k, params.rerank_top) if rerank else params.k,
        mode=params.mode,
        oversample=params.oversample or services.settings.index.oversample,
        filter=params.filter,
        max_distance=params.max_distance,
        segments_per_item=params.segments_per_item,
        nms_iou=params.nms_iou,
    )
    t = time.perf_counter()
    hits = await search(services.catalog, state.collection, state.index, state.scans, query, options)
    timings["search_ms"] = (time.perf_counter() - t) * 1000
    rerank_scores = None
    if rerank and hits:
        t = time.perf_counter()
        vectors = await asyncio.to_thread(_item_vectors, services, state, hits)
        hits = [h for h in hits if h.item_id in vectors]  # deleted since stage 1
        floats = np.stack([vectors[h.item_id] for h in hits]) if hits else np.zeros((0, state.collection.dim), np.float32)
        assert query.text is not None
        scores = await services.encoders.rerank(state.collection.encoder, query.text, floats) if hits else []
        rerank_scores = {h.item_id: float(s) for h, s in zip(hits, scores)}
        hits = sorted(hits, key=lambda h: (-rerank_scores[h.item_id], h.item_id))
        timings["rerank_ms"] = (time.perf_counter() - t) * 1000
    hits = hits[: params.k]
    items = await asyncio.to_thread(services.catalog.items_by_id, state.collection.name, [h.item_id for h in hits])
    mode = "binary" if params.mode == "binary" else "float"
    results = to_results(hits, items, mode, state.collection.bits, rerank_scores)
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    return {"results": results, "timings": timings, "mode": params.mode, "collection": name}


def _item_vectors(services: Services, state: CollectionState, hits: list[ItemHit]) -> dict[str, np.ndarray]:
    """Float embedding of each image item's (only) segment, for the relevance head.

    Read from the float index when the collection has one (no catalog round trip per candidate).
    """
    index = state.index.float
    if index is not None:
        present = [h for h in hits if h.best_segment_id in index]
        vectors = index.reconstruct(np.asarray([h.best_segment_id for h in present], dtype=np.int64)) if present else []
        return {h.item_id: v for h, v in zip(present, vectors)}
    c = state.collection
    out = {}
    for hit in hits:
        _, _, floats, _ = services.catalog.item_segments(c.name, hit.item_id, c.dim, c.bits)
        if len(floats):
            out[hit.item_id] = floats[0]
    return out
