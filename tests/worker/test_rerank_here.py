"""A text search's re-rank runs on the search's own worker thread (issue 35: no hops through the rerank
batcher): the head's scores must be the batcher's bit for bit, the calling thread's torch setting must
survive, and the search must hand ``then`` its final hits on the thread that ranked them."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch

from app.encoders.registry import discover
from app.errors import InvalidInput
from app.search import pipeline
from app.search.pipeline import Query, Scans, SearchOptions
from app.search.scan import SharedScan
from app.settings import BatchingSettings
from app.worker.encoding import EncoderPool
from tests.search.tiny_images import image_collection, unit_floats_and_codes

ENCODER = "image-text-minilm"


def test_rerank_here_scores_are_the_batchers_bit_for_bit():
    batches: list[tuple[str, int]] = []
    pool = EncoderPool(discover(), "cpu", BatchingSettings(), on_batch=lambda name, n: batches.append((name, n)))
    rng = np.random.default_rng(3)
    threads_in_head: list[int] = []

    async def run():
        encoder = await pool.load(ENCODER)
        head = encoder.rerank
        encoder.rerank = lambda *a: (threads_in_head.append(torch.get_num_threads()), head(*a))[1]  # type: ignore[method-assign]
        try:
            for i, n in enumerate((1, 7, 100)):
                text = f"a large red circle number {i}"
                images = rng.standard_normal((n, encoder.dim)).astype(np.float32)
                images /= np.linalg.norm(images, axis=1, keepdims=True)
                by_batcher = await pool.rerank(ENCODER, text, images)

                def on_a_pool_thread():
                    torch.set_num_threads(2)  # this thread's own setting: one thread for the head, then put back
                    return pool.rerank_here(encoder, text, images), torch.get_num_threads()

                here, threads_after = await asyncio.to_thread(on_a_pool_thread)
                assert threads_after == 2 and threads_in_head[-1] == 1
                assert here.dtype == by_batcher.dtype and np.array_equal(here, by_batcher)
            return encoder
        finally:
            await pool.stop()

    encoder = asyncio.run(run())
    # each head call is counted as the batcher counts its batches of one
    assert batches.count((f"{encoder.name}:rerank", 1)) == 6


def test_rerank_here_refuses_an_encoder_without_a_head():
    pool = EncoderPool(discover(), "cpu", BatchingSettings())
    encoder = asyncio.run(pool.load("image-baseline"))
    with pytest.raises(InvalidInput):
        pool.rerank_here(encoder, "text", np.zeros((1, encoder.dim), np.float32))


@pytest.mark.parametrize("inline", [True, False])
def test_search_hands_then_the_final_hits_on_the_ranking_thread(tmp_path, monkeypatch, inline):
    floats, codes = unit_floats_and_codes(np.random.default_rng(5), 120, 8, 16)
    catalog, collection, index = image_collection(tmp_path, floats, codes, [f"i{i:03d}" for i in range(120)])
    if not inline:
        monkeypatch.setattr(pipeline, "INLINE_SCAN_BYTES", -1)  # through the shared scan, then _rank's thread call
    ranked_on: list[int] = []
    real_rank = pipeline._rank
    monkeypatch.setattr(pipeline, "_rank", lambda *a: (ranked_on.append(threading.get_ident()), real_rank(*a))[1])
    query = Query(floats=floats[:1].copy(), codes=codes[:1].copy(), text="a query")
    options = SearchOptions(k=30, mode="two_stage", oversample=3)

    async def run(**kw):
        scans = Scans(SharedScan(index.binary, "b"), SharedScan(index.float, "f"))
        try:
            return await pipeline.search(catalog, collection, index, scans, query, options, **kw)
        finally:
            await scans.binary.stop()
            await scans.float.stop()

    plain = asyncio.run(run())
    seen: list[tuple[int, list]] = []
    result = asyncio.run(run(then=lambda hits: (seen.append((threading.get_ident(), hits)), "answer")[1]))
    assert result == "answer" and len(seen) == 1
    thread, hits = seen[0]
    assert thread == ranked_on[-1] != threading.get_ident()  # the ranking's worker thread, not the event loop
    assert [(h.item_id, h.distance) for h in hits] == [(h.item_id, h.distance) for h in plain]
    assert all(np.array_equal(a.vector, b.vector) for a, b in zip(hits, plain))
