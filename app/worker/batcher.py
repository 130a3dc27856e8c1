"""Dynamic batching: many concurrent requests share one model (or index) call.

A request submits a *group* of inputs (one image, or the hundreds of windows of a long
recording) and awaits one future. A single background task forms batches of at most
``max_batch_size`` inputs, taking whole or partial groups in arrival order. The batch function
runs on one dedicated thread so model work never blocks the event loop and batches never run
concurrently.

How long a batch waits for company depends on who is in it. A *patient* group (ingest, the
default) lets the batch wait up to ``max_wait_s`` after its first input. An *impatient* group
(a query) does not wait for nobody: it waits only while other requests have announced, with
:meth:`DynamicBatcher.expecting`, that their inputs are on the way (a query being decoded), and
still at most ``max_wait_s``. A lone query therefore goes straight to the model, while
concurrent queries share batches: those that arrive while a batch runs form the next one.
Queries never share a batch with ingest: they go first, alone, and while they keep coming
ingest runs in smaller batches, so search stays fast while a long recording is ingested.

If the batch function raises, every group with inputs in that batch fails with that error.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from app.errors import Overloaded, Unhealthy
from app.worker.tasks import cancel_and_wait

# while a query was taken this recently, ingest batches are kept to max_batch_size // INGEST_DIVISOR_WHILE_QUERIED
# (see DynamicBatcher._take_batch)
QUERIED_RECENTLY_S = 1.0
INGEST_DIVISOR_WHILE_QUERIED = 4

In = TypeVar("In")
Out = TypeVar("Out")


@dataclass(eq=False)  # identity: the queue removes *this* group (comparing inputs, numpy arrays, would raise)
class _Group(Generic[In]):
    inputs: Sequence[In]
    future: asyncio.Future
    enqueued_at: float
    outputs: list[Any] = field(default_factory=list)
    taken: int = 0  # inputs already handed to a batch
    patient: bool = True  # may the batch wait max_wait_s for company for this group's sake


class Announcement:
    """An open promise of a submit to come (see :meth:`DynamicBatcher.expecting`); ``done()``
    is idempotent, and leaving a ``with`` block calls it."""

    def __init__(self, batcher: "DynamicBatcher[Any, Any]") -> None:
        self._batcher: DynamicBatcher[Any, Any] | None = batcher
        batcher._expected += 1

    def done(self) -> None:
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher._expected -= 1
            if batcher._wakeup is not None:
                batcher._wakeup.set()  # a batch waiting for this request need not wait any more

    def __enter__(self) -> "Announcement":
        return self

    def __exit__(self, *exc: object) -> None:
        self.done()


@dataclass
class BatchStats:
    """Counters the metrics endpoint and the tests read."""

    batches: int = 0
    inputs: int = 0
    last_batch_size: int = 0
    batch_sizes: list[int] = field(default_factory=list)  # bounded history for metrics


class DynamicBatcher(Generic[In, Out]):
    """Batch inputs from concurrent callers into calls of ``run_batch(list[In]) -> list[Out]``.

    Args:
        run_batch: called on the worker thread with 1..max_batch_size inputs; must return one
            output per input, in order.
        max_batch_size: most inputs per call.
        max_wait_s: how long the first input of a batch waits for more.
        max_queue: most groups waiting; beyond it ``submit`` raises Overloaded (HTTP 429).
        name: label for metrics and errors.
        on_batch: optional callback(batch_size) after each batch, for metrics.
    """

    def __init__(
        self,
        run_batch: Callable[[list[In]], Sequence[Out]],
        *,
        max_batch_size: int = 32,
        max_wait_s: float = 0.005,
        max_queue: int = 1024,
        name: str = "batcher",
        on_batch: Callable[[int], None] | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.name = name
        self.on_batch = on_batch
        self.stats = BatchStats()
        self._queue: deque[_Group[In]] = deque()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"batch-{name}")
        self._stopped = False
        self._expected = 0  # requests that announced inputs on their way (see expecting)
        self.batch_has_query = False  # whether the batch being run holds an impatient group
        self._last_query_at = float("-inf")  # when a batch last took a query (monotonic seconds)

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher-{self.name}")

    async def stop(self) -> None:
        """Cancel the loop and fail every waiting request with Unhealthy."""
        self._stopped = True
        await cancel_and_wait(self._task)
        self._task = None
        while self._queue:
            group = self._queue.popleft()
            if not group.future.done():
                group.future.set_exception(Unhealthy(f"{self.name}: shutting down"))
        self._executor.shutdown(wait=False, cancel_futures=True)

    @property
    def queue_depth(self) -> int:
        return sum(len(g.inputs) - g.taken for g in self._queue)

    # --- submitting -----------------------------------------------------------------------

    def expecting(self) -> "Announcement":
        """Announce that this request will submit soon (e.g. while its upload is read and decoded).

        While announcements are open, a batch holding only impatient groups waits (at most
        ``max_wait_s``) for them instead of leaving at once: concurrent queries share a model
        call, and a lone query, which announces nothing beyond its own submit, never waits.
        End the announcement (``done()``, or leave the ``with`` block) right *before* submitting,
        with no ``await`` in between, or the batch would wait for the submit itself.
        """
        return Announcement(self)

    async def submit(self, item: In, *, patient: bool = True) -> Out:
        """Process one input; returns its output."""
        return (await self.submit_many([item], patient=patient))[0]

    async def submit_many(self, items: Sequence[In], *, patient: bool = True) -> list[Out]:
        """Process a group of inputs, possibly across several batches; outputs in order.

        ``patient=False`` (queries): the batch does not wait for company on this group's
        account, only for requests that announced themselves with :meth:`expecting`.
        """
        if self._stopped:
            raise Unhealthy(f"{self.name}: shutting down")
        if not items:
            return []
        if len(self._queue) >= self.max_queue:
            raise Overloaded(f"{self.name}: {len(self._queue)} requests are queued; retry shortly")
        if self._task is None:
            self.start()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.append(_Group(items, future, time.monotonic(), patient=patient))
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    # --- the loop -------------------------------------------------------------------------

    async def _loop(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            self._drop_cancelled()
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            deadline = time.monotonic() + self.max_wait_s
            # wait for company until the batch is full or the deadline passes, and only while
            # someone is worth waiting for: a patient group, or an announced request
            while self.queue_depth < self._room() and self._worth_waiting():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            slices = self._take_batch()
            if not slices:
                continue
            inputs = [x for group, start, stop in slices for x in group.inputs[start:stop]]
            try:
                outputs = await loop.run_in_executor(self._executor, self.run_batch, inputs)
                if len(outputs) != len(inputs):
                    raise RuntimeError(f"{self.name}: batch returned {len(outputs)} outputs for {len(inputs)} inputs")
            except Exception as exc:  # noqa: BLE001 - every caller in the batch gets the error
                for group, _, _ in slices:
                    if not group.future.done():
                        group.future.set_exception(exc)
                    self._discard(group)
                continue
            self._record(len(inputs))
            offset = 0
            for group, start, stop in slices:
                group.outputs.extend(outputs[offset : offset + stop - start])
                offset += stop - start
                if len(group.outputs) == len(group.inputs):
                    if not group.future.done():
                        group.future.set_result(group.outputs)

    def _worth_waiting(self) -> bool:
        # a batch with a query in it takes queries only (see _take_batch): it waits for announced
        # queries, never for ingest company
        if self._queries_waiting():
            return self._expected > 0
        return self._expected > 0 or any(group.patient for group in self._queue)

    def _take_batch(self) -> list[tuple[_Group[In], int, int]]:
        """Inputs for the next batch: the queued impatient groups (queries) alone, in arrival order;
        only when none is queued, patient ones (ingest).

        A query queued behind a long recording's hundreds of windows would otherwise wait for all
        of them (seconds of search latency during an ingest), and a query batch topped up with
        ingest windows would take as long as a full ingest batch instead of one window's time.
        While queries keep coming (one in the last ``QUERIED_RECENTLY_S``), ingest batches are
        also kept to a quarter of ``max_batch_size``: a query that arrives while one runs waits
        for that batch, so a smaller batch bounds its wait."""
        queries = self._queries_waiting()
        if queries:
            self._last_query_at = time.monotonic()
        room = self._room()
        slices = []
        for group in list(self._queue):
            if room == 0:
                break
            if group.patient == queries:  # queries alone when there are any, else ingest
                continue
            if group.future.done():  # cancelled or failed: costs no model time
                self._discard(group)
                continue
            start = group.taken
            stop = min(len(group.inputs), start + room)
            slices.append((group, start, stop))
            group.taken = stop
            room -= stop - start
            if group.taken == len(group.inputs):
                self._discard(group)
        self.batch_has_query = queries and bool(slices)
        return slices

    def _queries_waiting(self) -> bool:
        """Whether an impatient group (a query) has inputs no batch has taken yet."""
        return any(not g.patient and g.taken < len(g.inputs) and not g.future.done() for g in self._queue)

    def _room(self) -> int:
        """The next batch's size limit: a quarter of ``max_batch_size`` for ingest while queries
        keep coming (see :meth:`_take_batch`), else all of it."""
        if self._queries_waiting():
            return self.max_batch_size
        if time.monotonic() - self._last_query_at < QUERIED_RECENTLY_S:
            return max(1, self.max_batch_size // INGEST_DIVISOR_WHILE_QUERIED)
        return self.max_batch_size

    def _drop_cancelled(self) -> None:
        # a client that went away should not cost model time
        while self._queue and self._queue[0].future.done():
            self._queue.popleft()

    def _discard(self, group: _Group[In]) -> None:
        try:
            self._queue.remove(group)
        except ValueError:
            pass

    def _record(self, size: int) -> None:
        self.stats.batches += 1
        self.stats.inputs += size
        self.stats.last_batch_size = size
        self.stats.batch_sizes.append(size)
        del self.stats.batch_sizes[:-1000]
        if self.on_batch is not None:
            self.on_batch(size)
