import asyncio
import threading

import pytest

from app.errors import Overloaded, Unhealthy
from app.worker.batcher import DynamicBatcher


class Recorder:
    """A batch function that records each call's inputs and the thread it ran on."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[int]] = []
        self.threads: set[str] = set()
        self.fail_on = fail_on

    def __call__(self, batch: list[int]) -> list[int]:
        self.calls.append(list(batch))
        self.threads.add(threading.current_thread().name)
        if self.fail_on is not None and self.fail_on in batch:
            raise RuntimeError("model exploded")
        return [x * 10 for x in batch]


def test_batch_completes_when_full_not_before():
    """max_batch_size=3 with a huge wait: two submits wait, the third releases all three."""

    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=3, max_wait_s=1000)
        first = asyncio.ensure_future(batcher.submit(1))
        second = asyncio.ensure_future(batcher.submit(2))
        await asyncio.sleep(0.05)
        assert not first.done() and not second.done()
        third = await batcher.submit(3)
        assert (await first, await second, third) == (10, 20, 30)
        assert rec.calls == [[1, 2, 3]]
        await batcher.stop()

    asyncio.run(main())


def test_concurrent_requests_share_batches():
    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=0.02)
        results = await asyncio.gather(*(batcher.submit(i) for i in range(20)))
        assert results == [i * 10 for i in range(20)]
        assert len(rec.calls) < 20 and max(map(len, rec.calls)) <= 8
        assert len(rec.threads) == 1 and threading.current_thread().name not in rec.threads
        await batcher.stop()

    asyncio.run(main())


def test_a_group_larger_than_a_batch_is_split_and_reassembled_in_order():
    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=4, max_wait_s=0)
        out = await batcher.submit_many(list(range(10)))
        assert out == [i * 10 for i in range(10)]
        assert [len(c) for c in rec.calls] == [4, 4, 2]
        await batcher.stop()

    asyncio.run(main())


def test_a_failing_batch_fails_every_caller_in_it_and_the_batcher_goes_on():
    async def main():
        rec = Recorder(fail_on=2)
        batcher = DynamicBatcher(rec, max_batch_size=3, max_wait_s=1000)
        futures = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2, 3)]
        for f in futures:
            with pytest.raises(RuntimeError, match="exploded"):
                await f
        assert await asyncio.wait_for(asyncio.gather(*(batcher.submit(i) for i in (4, 5, 6))), 5) == [40, 50, 60]
        await batcher.stop()

    asyncio.run(main())


def test_full_queue_is_overloaded_and_stop_fails_waiters():
    async def main():
        batcher = DynamicBatcher(Recorder(), max_batch_size=100, max_wait_s=1000, max_queue=2)
        waiting = [asyncio.ensure_future(batcher.submit(i)) for i in range(2)]
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded):
            await batcher.submit(99)
        await batcher.stop()
        for f in waiting:
            with pytest.raises(Unhealthy):
                await f
        with pytest.raises(Unhealthy):
            await batcher.submit(1)

    asyncio.run(main())


def test_wrong_output_count_is_an_error():
    async def main():
        batcher = DynamicBatcher(lambda batch: batch[:-1], max_batch_size=2, max_wait_s=0)
        with pytest.raises(RuntimeError, match="outputs"):
            await batcher.submit_many([1, 2])
        await batcher.stop()

    asyncio.run(main())


@pytest.mark.parametrize("kwargs", [{"max_batch_size": 0}, {"max_wait_s": -1}, {"max_queue": 0}])
def test_constructor_arguments_are_validated(kwargs):
    with pytest.raises(ValueError):
        DynamicBatcher(Recorder(), **kwargs)


def test_a_lone_query_does_not_wait_for_company():
    """Impatient groups leave at once when nobody announced themselves, whatever max_wait_s."""

    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=1000)
        assert await asyncio.wait_for(batcher.submit(1, patient=False), 30) == 10
        assert rec.calls == [[1]]
        await batcher.stop()

    asyncio.run(main())


def test_queries_wait_for_announced_ones_and_share_their_batch():
    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=1000)
        with batcher.expecting():  # a second query is still being decoded
            first = asyncio.ensure_future(batcher.submit(1, patient=False))
            await asyncio.sleep(0.05)
            assert not first.done()  # held for the announced query, not sent alone
        second = await batcher.submit(2, patient=False)
        assert (await first, second) == (10, 20)
        assert rec.calls == [[1, 2]]
        await batcher.stop()

    asyncio.run(main())


def test_an_announcement_that_ends_without_a_submit_releases_the_batch():
    """A query whose decode fails must not hold the others until max_wait_s."""

    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=1000)
        waiting = None
        try:
            with batcher.expecting():
                waiting = asyncio.ensure_future(batcher.submit(1, patient=False))
                await asyncio.sleep(0.05)
                raise ValueError("corrupt upload")
        except ValueError:
            pass
        assert await asyncio.wait_for(waiting, 30) == 10
        await batcher.stop()

    asyncio.run(main())


def test_a_query_runs_alone_and_leaves_the_ingest_to_wait_for_its_own_company():
    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=1000)
        ingest = asyncio.ensure_future(batcher.submit(1))  # patient (the default)
        query = asyncio.ensure_future(batcher.submit(2, patient=False))
        assert await asyncio.wait_for(query, 5) == 20  # not held for the ingest's sake, nor batched with it
        await asyncio.sleep(0.05)
        assert not ingest.done()  # its batch (a quarter of 8 while queries come) is not full: it waits for company
        assert (await batcher.submit(3), await ingest) == (30, 10)
        assert rec.calls == [[2], [1, 3]]
        await batcher.stop()

    asyncio.run(main())


def test_queries_go_before_a_long_recordings_windows():
    """A query submitted after a 100-window ingest group is in the very next batch."""

    async def main():
        rec = Recorder()
        gate = threading.Event()

        def slow_first(batch):
            gate.wait(10)  # hold the first batch so both groups are queued behind it
            return rec(batch)

        batcher = DynamicBatcher(slow_first, max_batch_size=8, max_wait_s=0)
        ingest = asyncio.ensure_future(batcher.submit_many(list(range(100, 200))))
        await asyncio.sleep(0.05)  # the first ingest batch is running
        query = asyncio.ensure_future(batcher.submit(7, patient=False))
        await asyncio.sleep(0.05)
        gate.set()
        assert await query == 70
        assert await ingest == [x * 10 for x in range(100, 200)]
        assert rec.calls[0] == list(range(100, 108))
        assert rec.calls[1] == [7]  # the query alone in the second batch: one window's time, not eight
        assert {len(call) for call in rec.calls[2:-1]} == {2}  # then, a query being recent, ingest in quarters
        assert [x for call in rec.calls for x in call if x != 7] == list(range(100, 200))  # ingest order kept
        await batcher.stop()

    asyncio.run(main())


def test_ingest_batches_are_full_again_once_queries_stop(monkeypatch: pytest.MonkeyPatch):
    import app.worker.batcher as batcher_module

    monkeypatch.setattr(batcher_module, "QUERIED_RECENTLY_S", 0.2)

    async def main():
        rec = Recorder()
        batcher = DynamicBatcher(rec, max_batch_size=8, max_wait_s=0)
        assert await batcher.submit(1, patient=False) == 10
        await batcher.submit_many(list(range(100, 116)))  # right after a query: quarters
        await asyncio.sleep(0.3)
        await batcher.submit_many(list(range(200, 216)))  # no query for a while: full batches
        assert [len(call) for call in rec.calls] == [1] + [2] * 8 + [8, 8]
        await batcher.stop()

    asyncio.run(main())


def test_array_inputs_queued_behind_an_ingest_are_discarded_once_taken():
    """Groups are removed from the queue by identity: comparing two groups' numpy inputs would raise, and a
    query left in the queue after its batch would keep the ingest behind it from ever running."""
    import numpy as np

    async def main():
        gate = threading.Event()
        calls = []

        def run(batch):
            gate.wait(10)
            calls.append(len(batch))
            return [float(x.sum()) for x in batch]

        batcher = DynamicBatcher(run, max_batch_size=4, max_wait_s=0)
        ingest = asyncio.ensure_future(batcher.submit_many([np.full(3, i, np.float32) for i in range(12)]))
        await asyncio.sleep(0.05)  # the ingest's first batch is running: the next groups queue behind it
        short = asyncio.ensure_future(batcher.submit(np.full(3, 50, np.float32)))  # one window, like a query
        queries = [asyncio.ensure_future(batcher.submit(np.full(3, 100 + q, np.float32), patient=False)) for q in range(2)]
        await asyncio.sleep(0.05)
        gate.set()
        answers = await asyncio.wait_for(asyncio.gather(*queries), 5)
        assert answers == [300.0, 303.0]
        assert all(g.taken < len(g.inputs) for g in batcher._queue)  # the answered queries' groups are gone
        assert await asyncio.wait_for(ingest, 5) == [3.0 * i for i in range(12)]
        assert await asyncio.wait_for(short, 5) == 150.0
        assert batcher.queue_depth == 0 and not batcher._queue  # nothing left behind
        assert calls[1] == 2  # both queries in one batch, alone
        await batcher.stop()

    asyncio.run(main())
