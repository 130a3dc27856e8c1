"""N concurrent HTTP queries make fewer than N encoder calls (and share index scans)."""

import asyncio
from contextlib import asynccontextmanager

import httpx
import numpy as np
from asgi_lifespan import LifespanManager

from app.main import create_app
from app.search import pipeline
from tests.conftest import make_settings, tone_wav


@asynccontextmanager
async def running_app(settings):
    """The app with its lifespan running, an async client on it, and the app's services."""
    async with LifespanManager(create_app(settings)) as manager:
        transport = httpx.ASGITransport(app=manager.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            await client.post("/v1/collections", json={"name": "a", "modality": "audio"})
            yield client, manager._state["services"]


def test_concurrent_queries_share_encoder_batches(tmp_path, monkeypatch):
    # a tiny index is normally scanned on the ranking thread; make it take the shared scan
    monkeypatch.setattr(pipeline, "INLINE_SCAN_BYTES", -1)
    settings = make_settings(tmp_path, batching={"max_batch_size": 16, "max_wait_ms": 50})

    async def main():
        async with running_app(settings) as (client, services):
            files = [("files", (f"t{i}.wav", tone_wav(200 + 300 * i))) for i in range(4)]
            await client.post("/v1/collections/a/items", files=files)
            encoder = services.encoders.encoders["audio-baseline"]
            calls = []
            original = encoder.encode
            encoder.encode = lambda batch: calls.append(len(batch)) or original(batch)
            n = 12
            queries = [
                client.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav(200 + 300 * (i % 4)))}, data={"k": "1"})
                for i in range(n)
            ]
            responses = await asyncio.gather(*queries)
            assert all(r.status_code == 200 for r in responses)
            for i, r in enumerate(responses):
                assert r.json()["results"][0]["id"] == f"t{i % 4}.wav"
            assert sum(calls) == n and len(calls) < n, calls
            scan = services.collections["a"].scans.binary._batcher.stats
            assert scan.inputs >= n and np.max(scan.batch_sizes) > 1

    asyncio.run(main())


def test_a_full_encoder_queue_answers_429_and_changes_nothing(tmp_path):
    settings = make_settings(tmp_path, batching={"max_batch_size": 1, "max_wait_ms": 0, "max_queue": 1})

    async def main():
        async with running_app(settings) as (client, services):
            encoder = services.encoders.encoders["audio-baseline"]
            original = encoder.encode

            def slow(batch):
                import time

                time.sleep(1.0)  # one request busy in the model, one queued: the third has no room
                return original(batch)

            encoder.encode = slow
            posts = [
                client.post("/v1/collections/a/items", files=[("files", (f"f{i}.wav", tone_wav(300 + 100 * i)))])
                for i in range(4)
            ]
            responses = await asyncio.gather(*posts)
            codes = sorted(r.status_code for r in responses)
            assert 429 in codes and 200 in codes, codes
            refused = [r for r in responses if r.status_code == 429]
            assert all(r.json()["error"]["code"] == "overloaded" for r in refused)
            stats = (await client.get("/v1/collections/a")).json()
            assert stats["items"] == codes.count(200) == stats["indexed_segments"]

    asyncio.run(main())


def test_a_small_index_is_scanned_without_the_shared_scanner(tmp_path):
    """Below INLINE_SCAN_BYTES the scan runs on the ranking thread: same answers, no hand-off."""
    settings = make_settings(tmp_path)

    async def main():
        async with running_app(settings) as (client, services):
            files = [("files", (f"t{i}.wav", tone_wav(200 + 300 * i))) for i in range(4)]
            await client.post("/v1/collections/a/items", files=files)
            for mode in ("binary", "float", "two_stage"):
                r = await client.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav(500))},
                                      data={"k": "2", "mode": mode})
                assert r.status_code == 200 and r.json()["results"][0]["id"] == "t1.wav", r.text
            scans = services.collections["a"].scans
            assert scans.binary._batcher.stats.inputs == 0 and scans.float._batcher.stats.inputs == 0

    asyncio.run(main())
