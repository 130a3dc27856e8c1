"""A search request -> query vectors -> ranked results, with timings per stage.

The query path is latency-bound, so it avoids hops between threads where they cost more than the
work they move: a small PCM WAV is decoded on the event loop (a numpy view and a resample, well
under a millisecond), and the whole ranking after the index scan is one worker-thread call. The
query announces itself to the encoder's batcher while it decodes, so concurrent queries share a
model call while a lone one goes to the model without waiting (see ``app.worker.batcher``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

import numpy as np

from app.encoders.base import Encoder
from app.encoders.side_thread import in_flight
from app.errors import InvalidInput
from app.features.windows import cut_audible_windows
from app.media.audio import decode_audio, uses_fast_path
from app.media.decode import Upload, decode_media
from app.search.pipeline import Query, SearchOptions, search
from app.search.ranking import ItemHit, to_results
from app.usecases.services import CollectionState, Services
from app.worker.batcher import Announcement


class SearchParams(Protocol):
    """What a search asks for, already validated by the caller (the HTTP edge passes its
    ``SearchRequest``); a protocol, so this use case does not import the HTTP schemas."""

    item_id: str | None
    text: str | None
    k: int
    mode: str
    oversample: int | None
    nprobe: int | None
    filter: dict[str, Any]
    max_distance: float | None
    segments_per_item: int
    nms_iou: float
    item_distance: str
    rerank: bool
    rerank_top: int
    partial: bool


async def build_query(
    services: Services, state: CollectionState, params: SearchParams, upload: Upload | None, timings: dict[str, float],
    announcement: Announcement | None = None,
) -> Query:
    """Vectors for the one query source given: an example file, a stored item, or a text.

    ``announcement``: the route's promise to the encoder's batcher that this request will
    submit (made before the body was read); it is ended right before the submit, or at once
    when the query turns out to need no example encoding.
    """
    collection = state.collection
    if upload is None and announcement is not None:
        announcement.done()
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
        emb = await services.encoders.encode_text(collection.encoder_key, [params.text], patient=False)
        timings["encode_ms"] = (time.perf_counter() - t) * 1000
        encoder = await services.encoders.load(collection.encoder_key)
        codes = services.posthoc.query_codes(collection, encoder, emb.floats, emb.codes, stored=len(state.index),
                                             needs_codes=params.mode != "float")
        return Query(floats=emb.floats, codes=codes, text=params.text)
    assert upload is not None
    encoder = await services.encoders.load(collection.encoder_key)
    t = time.perf_counter()
    announcement = announcement or services.encoders.expecting(collection.encoder_key)
    try:
        media = await _decode_query(services, collection.modality, upload, encoder.sample_rate)
    finally:
        # ended before encode() submits, with no await in between: the batcher waits for other
        # queries still on their way, never for this one
        if announcement is not None:
            announcement.done()
    timings["decode_ms"] = (time.perf_counter() - t) * 1000
    if collection.modality == "audio":
        assert encoder.sample_rate and collection.window_s and collection.hop_s
        inputs, _ = cut_audible_windows(media, encoder.sample_rate, collection.window_s, collection.hop_s)
    else:
        inputs = [media]
    t = time.perf_counter()
    emb = await services.encoders.encode(collection.encoder_key, inputs, patient=False)
    timings["encode_ms"] = (time.perf_counter() - t) * 1000
    # an encoder without a hash head: the collection's fitted codes (app/usecases/posthoc_codes.py)
    codes = services.posthoc.query_codes(collection, encoder, emb.floats, emb.codes, stored=len(state.index),
                                         needs_codes=params.mode != "float")
    return Query(floats=emb.floats, codes=codes)


# Largest PCM WAV decoded on the event loop: ~16 s of 16 kHz mono, or ~2.7 s of 48 kHz stereo;
# its decode and resample take about a millisecond at most. Larger files go to a worker thread.
INLINE_DECODE_BYTES = 512 * 1024


async def _decode_query(services: Services, modality: str, upload: Upload, sample_rate: int | None) -> np.ndarray:
    if modality == "audio" and len(upload.data) <= INLINE_DECODE_BYTES and uses_fast_path(upload.data):
        assert sample_rate is not None
        limits = services.settings.limits  # the limits decode_media applies to a query
        return decode_audio(upload.data, target_rate=sample_rate, filename=upload.filename,
                            min_seconds=limits.min_audio_seconds, max_seconds=limits.max_query_seconds)
    return await decode_media(services.settings.limits, modality, upload, sample_rate=sample_rate, query=True)


async def run_search(
    services: Services, name: str, params: SearchParams, upload: Upload | None, announcement: Announcement | None = None,
) -> dict[str, Any]:
    # a lone search may run its model's independent halves on both cores (app/encoders/side_thread.py)
    with in_flight():
        return await _run_search(services, name, params, upload, announcement)


async def _run_search(
    services: Services, name: str, params: SearchParams, upload: Upload | None, announcement: Announcement | None,
) -> dict[str, Any]:
    started = time.perf_counter()
    state = services.state(name)
    limits = services.settings.limits
    if params.k > limits.max_k:
        raise InvalidInput(f"k must be between 1 and {limits.max_k}, got {params.k}")
    if params.text is not None and len(params.text) > limits.max_text_chars:
        raise InvalidInput(f"the text is {len(params.text)} characters; the limit is {limits.max_text_chars} (limits.max_text_chars)")
    timings: dict[str, float] = {}
    query = await build_query(services, state, params, upload, timings, announcement)
    rerank = params.text is not None and params.rerank and (await services.encoders.load(state.collection.encoder_key)).supports_rerank
    options = SearchOptions(
        k=max(params.k, params.rerank_top) if rerank else params.k,
        mode=params.mode,
        oversample=params.oversample or services.settings.index.oversample,
        filter=params.filter,
        max_distance=params.max_distance,
        segments_per_item=params.segments_per_item,
        nms_iou=params.nms_iou,
        item_distance=params.item_distance,
        nprobe=params.nprobe,
    )
    t = time.perf_counter()
    searched_from = time.monotonic()  # cluster mode: shard calls inside this window are this search's
    rerank_scores = None
    if rerank:
        # the head runs on the search's own worker thread, right after the ranking, and reads the final
        # hits' catalog rows there too: one thread call for the whole query after its embedding
        encoder = await services.encoders.load(state.collection.encoder_key)
        assert query.text is not None
        text = query.text

        def rerank_here(found: list[ItemHit]) -> tuple[list[ItemHit], dict[str, float] | None]:
            timings["search_ms"] = (time.perf_counter() - t) * 1000
            return _reranked(services, state, encoder, text, found, params.k, timings)

        hits, rerank_scores = await search(services.catalog, state.collection, state.index, state.scans, query, options, then=rerank_here)
    else:
        # without re-ranking the hits are final: their catalog rows come in the search's own thread call
        hits = await search(services.catalog, state.collection, state.index, state.scans, query, options, with_items=True)
        timings["search_ms"] = (time.perf_counter() - t) * 1000
    hits = hits[: params.k]
    if all(h.item is not None for h in hits):
        items = {h.item_id: h.item for h in hits}
    else:
        items = await asyncio.to_thread(services.catalog.items_by_id, state.collection.name, [h.item_id for h in hits])
    mode = "binary" if params.mode == "binary" else "float"
    results = to_results(hits, items, mode, state.collection.bits, rerank_scores)
    timings["total_ms"] = (time.perf_counter() - started) * 1000
    response = {"results": results, "timings": timings, "mode": params.mode, "collection": name}
    missed = getattr(state.index, "shards_missed", None)  # Ray shards: 503, or marked partial on request
    if missed is not None and (partial := missed(searched_from, time.monotonic(), params.partial)):
        response["partial"] = partial
    return response


def _reranked(
    services: Services, state: CollectionState, encoder: Encoder, text: str, hits: list[ItemHit], k: int,
    timings: dict[str, float],
) -> tuple[list[ItemHit], dict[str, float] | None]:
    """Stage 2 on the calling worker thread: the relevance head's order of the stage-1 hits (each with the
    vector the two-stage search read, or one gathered now), the top ``k`` with their catalog rows."""
    if not hits:
        return hits, None
    started = time.perf_counter()
    if all(h.vector is not None for h in hits):  # read by the two-stage search already
        vectors = {h.item_id: h.vector for h in hits}
    else:
        vectors = _item_vectors(services, state, hits)
    hits = [h for h in hits if h.item_id in vectors]  # deleted since stage 1
    floats = np.stack([vectors[h.item_id] for h in hits]) if hits else np.zeros((0, state.collection.dim), np.float32)
    scores = services.encoders.rerank_here(encoder, text, floats) if hits else []
    rerank_scores = {h.item_id: float(s) for h, s in zip(hits, scores)}
    hits = sorted(hits, key=lambda h: (-rerank_scores[h.item_id], h.item_id))[:k]
    timings["rerank_ms"] = (time.perf_counter() - started) * 1000
    items = services.catalog.items_by_id(state.collection.name, [h.item_id for h in hits])
    for hit in hits:
        hit.item = items.get(hit.item_id, {})
    return hits, rerank_scores


def _item_vectors(services: Services, state: CollectionState, hits: list[ItemHit]) -> dict[str, np.ndarray]:
    """Float embedding of each image item's (only) segment, for the relevance head.

    Read from the float index when the collection has one (no catalog round trip per candidate).
    """
    index = state.index.float
    if index is not None:
        by_segment = {h.best_segment_id: h.item_id for h in hits}
        present, vectors = index.reconstruct_present(np.asarray(list(by_segment), dtype=np.int64))
        return {by_segment[sid]: v for sid, v in zip(present.tolist(), vectors)}
    c = state.collection
    out = {}
    for hit in hits:
        _, _, floats, _ = services.catalog.item_segments(c.name, hit.item_id, c.dim, c.bits)
        if len(floats):
            out[hit.item_id] = floats[0]
    return out
