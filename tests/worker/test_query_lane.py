"""Queries beside a long ingest: the batcher's two schedules (one lane, and a query lane) answer a query
before the ingest finishes, keep every ingest window in order, give the same outputs, and stop cleanly."""

import asyncio
import threading

import numpy as np
import pytest
import torch

from app.encoders import side_thread
from app.errors import Unhealthy
from app.worker.batcher import DynamicBatcher
from app.worker.encoding import _ThreadCount

INGEST = list(range(1000, 1100))  # a recording's 100 windows


def gated(record: list[list[int]] | None = None):
    """A batch function (x -> 10 x) whose ingest batches (inputs >= 1000) wait for a gate."""
    gate = threading.Event()

    def run(batch):
        if batch[0] >= 1000:
            assert gate.wait(10), "the test never opened the gate"
        if record is not None:
            record.append(list(batch))
        return [x * 10 for x in batch]

    return run, gate


@pytest.mark.parametrize("query_lane", [False, True])
def test_a_query_during_a_long_ingest_is_answered_before_the_ingest_finishes(query_lane):
    async def main():
        calls: list[list[int]] = []
        run, gate = gated(calls)
        batcher = DynamicBatcher(run, max_batch_size=8, max_wait_s=0, query_lane=query_lane)
        ingest = asyncio.ensure_future(batcher.submit_many(INGEST))
        await asyncio.sleep(0.05)  # the ingest's first batch is running, held by the gate
        query = asyncio.ensure_future(batcher.submit(7, patient=False))
        if query_lane:  # answered on its own thread while the ingest batch is still held
            assert await asyncio.wait_for(query, 5) == 70
            assert not ingest.done() and calls == [[7]]
            gate.set()
        else:  # answered right after the batch in flight, long before the rest of the recording
            await asyncio.sleep(0.05)
            gate.set()
            assert await asyncio.wait_for(query, 5) == 70
            assert not ingest.done()
            assert calls[:2] == [INGEST[:8], [7]]
        assert await asyncio.wait_for(ingest, 5) == [x * 10 for x in INGEST]  # every window, in order
        assert [x for call in calls for x in call if x != 7] == INGEST  # each window encoded once
        await batcher.stop()

    asyncio.run(main())


def test_with_a_query_lane_each_thread_knows_whether_its_batch_holds_a_query():
    """The two lanes run at once, so 'this batch holds a query' (the encoder's thread count reads it)
    is per thread: the ingest batch running beside a query batch still sees False."""

    async def main():
        seen: list[tuple[str, bool, int]] = []
        gate = threading.Event()
        batcher: DynamicBatcher[int, int]

        def run(batch):
            if batch[0] >= 1000:
                assert gate.wait(10)
            seen.append((threading.current_thread().name, batcher.batch_has_query, batch[0]))
            return batch

        batcher = DynamicBatcher(run, max_batch_size=32, max_wait_s=0, query_lane=True, name="enc")
        ingest = asyncio.ensure_future(batcher.submit_many(INGEST))
        await asyncio.sleep(0.05)
        assert await asyncio.wait_for(batcher.submit(3, patient=False), 5) == 3
        gate.set()
        await asyncio.wait_for(ingest, 5)
        query_threads = {name for name, has_query, first in seen if first < 1000}
        ingest_threads = {name for name, has_query, first in seen if first >= 1000}
        assert all(has_query == (first < 1000) for _, has_query, first in seen)
        assert query_threads.isdisjoint(ingest_threads) and len(ingest_threads) == 1
        await batcher.stop()

    asyncio.run(main())


def test_with_a_query_lane_ingest_batches_stay_full_while_queries_come():
    async def main():
        calls: list[list[int]] = []
        run, gate = gated(calls)
        gate.set()
        batcher = DynamicBatcher(run, max_batch_size=8, max_wait_s=0, query_lane=True)
        assert await batcher.submit(1, patient=False) == 10
        assert batcher.queried_recently()
        await batcher.submit_many(INGEST[:32])
        assert [len(c) for c in calls] == [1, 8, 8, 8, 8]
        one_lane = DynamicBatcher(run, max_batch_size=8, max_wait_s=0, ingest_batch_while_queried=3)
        calls.clear()
        await one_lane.submit(1, patient=False)
        await one_lane.submit_many(INGEST[:9])
        assert [len(c) for c in calls] == [1, 3, 3, 3]  # one lane: the configured size while queried
        await batcher.stop()
        await one_lane.stop()

    asyncio.run(main())


@pytest.mark.parametrize("query_lane", [False, True])
def test_stop_while_an_ingest_batch_runs_does_not_hang_and_fails_the_waiters(query_lane):
    async def main():
        run, gate = gated()
        batcher = DynamicBatcher(run, max_batch_size=4, max_wait_s=0, query_lane=query_lane)
        ingest = asyncio.ensure_future(batcher.submit_many(INGEST))
        await asyncio.sleep(0.05)  # its first batch is held by the gate
        queued = asyncio.ensure_future(batcher.submit_many([2000, 2001]))
        await asyncio.sleep(0.01)
        await asyncio.wait_for(batcher.stop(), 2)  # does not wait for the held batch
        for future in (ingest, queued):
            with pytest.raises((Unhealthy, asyncio.CancelledError)):
                await asyncio.wait_for(future, 2)
        with pytest.raises(Unhealthy):
            await batcher.submit(5, patient=False)
        gate.set()  # the held batch ends on its thread; nothing waits for it

    asyncio.run(main())


@pytest.mark.parametrize("query_lane,while_queried", [(False, None), (False, 1), (True, None), (True, 3)])
def test_outputs_do_not_depend_on_the_schedule(query_lane, while_queried):
    """Ingest groups and queries arriving at random moments get exactly what the batch function gives
    each input alone, whatever the lanes and batch sizes."""
    rng = np.random.default_rng(7)
    weights = rng.normal(size=(5, 3)).astype(np.float32)

    def run(batch):
        out = np.tanh(np.stack(batch) @ weights)  # row by row: a batch's rows do not mix
        return list(out)

    async def main():
        batcher = DynamicBatcher(run, max_batch_size=8, max_wait_s=0.001, query_lane=query_lane,
                                 ingest_batch_while_queried=while_queried)
        inputs = [rng.normal(size=5).astype(np.float32) for _ in range(300)]

        async def client(start: int, size: int, patient: bool, delay: float):
            await asyncio.sleep(delay)
            return start, await batcher.submit_many(inputs[start:start + size], patient=patient)

        tasks = [client(0, 120, True, 0.0), client(120, 90, True, 0.002)]
        tasks += [client(210 + i, 1, False, float(rng.uniform(0, 0.01))) for i in range(90)]
        for start, outputs in await asyncio.gather(*tasks):
            for offset, out in enumerate(outputs):
                np.testing.assert_array_equal(out, run([inputs[start + offset]])[0])
        await batcher.stop()

    asyncio.run(main())


def test_ingest_model_work_keeps_to_one_thread_while_queries_come_and_counts_as_in_flight():
    """The encoder pool's per-batch thread count: a query batch and, while queries keep coming, an
    ingest batch run on one torch thread; a large ingest batch with no query lately gets the configured
    count. With a query lane an ingest batch counts as a request in flight, so a query beside it keeps
    its model on its own thread (app/encoders/side_thread.py)."""

    async def main():
        seen: list[tuple[bool, int, int]] = []
        threads = _ThreadCount(2)

        def work(encoder, batch):
            seen.append((threads.batcher.batch_has_query, torch.get_num_threads(), side_thread._in_flight))
            return batch

        batcher = DynamicBatcher(lambda batch: threads.run(work, None, batch), max_batch_size=32, max_wait_s=0,
                                 query_lane=True)
        threads.batcher = batcher
        await batcher.submit_many(INGEST[:32])  # no query yet: the configured two threads
        await batcher.submit(1, patient=False)
        await batcher.submit_many(INGEST[:32])  # queries keep coming: one thread
        assert [(q, n) for q, n, _ in seen] == [(False, 2), (True, 1), (False, 1)]
        assert [flight for _, _, flight in seen] == [1, 0, 1]
        await batcher.stop()

    before = torch.get_num_threads()
    asyncio.run(main())
    assert torch.get_num_threads() == before  # set on the batcher's threads, not this one


def test_the_ingest_lane_can_run_at_a_lower_priority_than_queries():
    import os

    async def main():
        nice: dict[bool, int] = {}
        batcher: DynamicBatcher[int, int]

        def run(batch):
            nice[batcher.batch_has_query] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
            return batch

        batcher = DynamicBatcher(run, max_batch_size=4, max_wait_s=0, query_lane=True, ingest_nice=3)
        await batcher.submit(1, patient=False)
        await batcher.submit_many(INGEST[:4])
        await batcher.stop()
        return nice

    nice = asyncio.run(main())
    assert nice[False] == min(19, nice[True] + 3)  # the query lane keeps the service's priority


def test_the_service_answers_the_same_with_and_without_a_query_lane(tmp_path):
    """Through the app (the training-free audio encoder): a recording ingested while queries come, then
    searched; both schedules give the same answers, and the queries beside the ingest all succeed."""
    from asgi_lifespan import LifespanManager
    import httpx

    from app.main import create_app
    from tests.conftest import make_settings, tone_wav, wave_bytes

    rate = 16000
    t = np.arange(30 * rate) / rate
    recording = wave_bytes((0.3 * np.sin(2 * np.pi * (300 + 40 * (t // 3)) * t)).astype(np.float32), rate)

    async def answers(query_lane: bool) -> list:
        settings = make_settings(tmp_path / str(query_lane), batching={"query_lane": query_lane, "max_batch_size": 4})
        async with LifespanManager(create_app(settings)) as manager:
            transport = httpx.ASGITransport(app=manager.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
                await client.post("/v1/collections", json={"name": "a", "modality": "audio"})
                await client.post("/v1/collections/a/items", files=[("files", ("tone.wav", tone_wav(700)))])
                ingest = asyncio.ensure_future(client.post("/v1/collections/a/items", files=[("files", ("rec.wav", recording))]))
                beside = [await client.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav(300 + 40 * i))})
                          for i in range(6)]
                assert (await ingest).status_code == 200 and all(r.status_code == 200 for r in beside)
                out = []
                for i in range(0, 10, 3):
                    r = await client.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav(300 + 40 * i))})
                    out.append([(hit["id"], hit["distance"], [(s["start"], s["end"], s["distance"]) for s in hit["segments"]])
                                for hit in r.json()["results"]])
                return out

    one_lane, query_lane = asyncio.run(answers(False)), asyncio.run(answers(True))
    # the same items and segments, distances to the float rounding a window's row gets from the batch
    # shape it was computed in (BLAS picks kernels by shape: one lane alone differs so between runs)
    assert [[(i, [(a, b) for a, b, _ in seg]) for i, _, seg in hits] for hits in one_lane] == \
        [[(i, [(a, b) for a, b, _ in seg]) for i, _, seg in hits] for hits in query_lane]
    distances = lambda answers: [d for hits in answers for _, dist, seg in hits for d in [dist, *(x for *_, x in seg)]]  # noqa: E731
    np.testing.assert_allclose(distances(one_lane), distances(query_lane), atol=1e-5)
    assert any(hit[0] == "rec.wav" for hits in one_lane for hit in hits)
