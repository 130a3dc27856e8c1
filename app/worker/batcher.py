"""Dynamic batching: many concurrent requests share one model (or index) call.

A request submits a *group* of inputs (one image, or the hundreds of windows of a long
recording) and awaits one future. A background task forms batches of at most ``max_batch_size``
inputs, taking whole or partial groups in arrival order. The batch function runs on a dedicated
thread so model work never blocks the event loop; two batches of one lane never run at once.

How long a batch waits for company depends on who is in it. A *patient* group (ingest, the
default) lets the batch wait up to ``max_wait_s`` after its first input. An *impatient* group
(a query) does not wait for nobody: it waits only while other requests have announced, with
:meth:`DynamicBatcher.expecting`, that their inputs are on the way (a query being decoded), and
still at most ``max_wait_s``. A lone query therefore goes straight to the model, while
concurrent queries share batches: those that arrive while a batch runs form the next one.
Queries never share a batch with ingest, nor wait behind a recording's queued windows:

* with ``query_lane`` (two lanes, each with its loop and thread; the encoders' default, see
  ``batching.query_lane``), query batches run beside the ingest batch in flight, and ingest
  batches keep their size (their model work drops to one thread while queries keep coming, so
  the other core is the queries');
* with one lane, queries go first, alone, and while they keep coming ingest runs in smaller
  batches (``ingest_batch_while_queried``), which bounds a query's wait for the batch in flight.

If the batch function raises, every group with inputs in that batch fails with that error.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Sequence, TypeVar

from app.errors import Overloaded, Unhealthy
from app.worker.tasks import cancel_and_wait, lower_thread_priority

# "queries keep coming": one was taken this recently. Then, with one lane, ingest batches are kept to
# ingest_batch_while_queried (default max_batch_size // INGEST_DIVISOR_WHILE_QUERIED; see
# DynamicBatcher._take_batch), and with two lanes ingest model work runs on one thread (app/worker/encoding.py).
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


# which groups a lane's loop takes: both kinds (queries first), or only one
ALL, QUERIES, INGEST = "all", "queries", "ingest"


@dataclass(eq=False)
class _Lane:
    """One loop forming batches and the one thread that runs them."""

    takes: str
    executor: ThreadPoolExecutor
    task: asyncio.Task | None = None


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
        run_batch: called on a worker thread with 1..max_batch_size inputs; must return one
            output per input, in order. With ``query_lane`` it may run on two threads at once
            (a query batch beside an ingest batch), never two batches of one kind at once.
        max_batch_size: most inputs per call.
        max_wait_s: how long the first input of a batch waits for more.
        max_queue: most groups waiting; beyond it ``submit`` raises Overloaded (HTTP 429).
        name: label for metrics and errors.
        on_batch: optional callback(batch_size) after each batch, for metrics.
        query_lane: run query batches on their own thread, beside ingest batches.
        ingest_nice: with ``query_lane``, niceness added to the ingest thread (Linux), so that a
            query batch beside an ingest batch gets the core first.
        ingest_batch_while_queried: most ingest inputs per batch while queries keep coming; None:
            a quarter of ``max_batch_size`` with one lane (a query waits for that batch), all of it
            with ``query_lane`` (it does not).
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
        query_lane: bool = False,
        ingest_batch_while_queried: int | None = None,
        ingest_nice: int = 0,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if max_wait_s < 0:
            raise ValueError("max_wait_s must be >= 0")
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        if ingest_batch_while_queried is not None and ingest_batch_while_queried < 1:
            raise ValueError("ingest_batch_while_queried must be >= 1")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.max_queue = max_queue
        self.name = name
        self.on_batch = on_batch
        self.query_lane = query_lane
        if ingest_batch_while_queried is None:
            ingest_batch_while_queried = max_batch_size if query_lane else max(1, max_batch_size // INGEST_DIVISOR_WHILE_QUERIED)
        self.ingest_batch_while_queried = min(max_batch_size, ingest_batch_while_queried)
        self.stats = BatchStats()
        self._queue: deque[_Group[In]] = deque()
        self._wakeup: asyncio.Event | None = None
        self._lanes = [_Lane(QUERIES, self._thread("query")), _Lane(INGEST, self._thread("ingest", ingest_nice))] \
            if query_lane else [_Lane(ALL, self._thread(""))]
        self._stopped = False
        self._expected = 0  # requests that announced inputs on their way (see expecting)
        self._running = threading.local()  # per worker thread: whether its batch holds a query
        self._last_query_at = float("-inf")  # when a batch last took a query (monotonic seconds)

    def _thread(self, lane: str, nice: int = 0) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"batch-{self.name}{'-' + lane if lane else ''}",
                                  initializer=lower_thread_priority if nice else None, initargs=(nice,) if nice else ())

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._wakeup is None:
            self._wakeup = asyncio.Event()
            loop = asyncio.get_running_loop()
            for lane in self._lanes:
                lane.task = loop.create_task(self._loop(lane), name=f"batcher-{self.name}-{lane.takes}")

    async def stop(self) -> None:
        """Cancel the loops and fail every waiting request with Unhealthy."""
        self._stopped = True
        for lane in self._lanes:
            await cancel_and_wait(lane.task)
            lane.task = None
        while self._queue:
            group = self._queue.popleft()
            if not group.future.done():
                group.future.set_exception(Unhealthy(f"{self.name}: shutting down"))
        for lane in self._lanes:
            lane.executor.shutdown(wait=False, cancel_futures=True)

    @property
    def queue_depth(self) -> int:
        return sum(len(g.inputs) - g.taken for g in self._queue)

    @property
    def batch_has_query(self) -> bool:
        """Whether the batch that the calling worker thread is running holds a query."""
        return getattr(self._running, "query", False)

    def queried_recently(self) -> bool:
        """Whether queries keep coming: a batch took one in the last ``QUERIED_RECENTLY_S``."""
        return time.monotonic() - self._last_query_at < QUERIED_RECENTLY_S

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
        if self._wakeup is None:
            self.start()
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        self._queue.append(_Group(items, future, time.monotonic(), patient=patient))
        assert self._wakeup is not None
        self._wakeup.set()
        return await future

    # --- the loops (one per lane) ---------------------------------------------------------

    async def _loop(self, lane: _Lane) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            self._drop_cancelled()
            # no await between this check and clear(): a submit after it sets the event again
            if not self._waiting(lane):
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            deadline = time.monotonic() + self.max_wait_s
            # wait for company until the batch is full or the deadline passes, and only while
            # someone is worth waiting for: a patient group, or an announced request
            while self._waiting(lane) < self._room(lane) and self._worth_waiting(lane):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            slices, query = self._take_batch(lane)
            if not slices:
                continue
            inputs = [x for group, start, stop in slices for x in group.inputs[start:stop]]
            try:
                outputs = await loop.run_in_executor(lane.executor, self._run, inputs, query)
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

    def _run(self, inputs: list[In], query: bool) -> Sequence[Out]:
        """On the lane's thread: ``run_batch``, with :attr:`batch_has_query` answering for this batch."""
        self._running.query = query
        try:
            return self.run_batch(inputs)
        finally:
            self._running.query = False

    def _takes_queries(self, lane: _Lane) -> bool:
        """Whether the lane's next batch is a query batch (its loop then takes queries only)."""
        return lane.takes == QUERIES or (lane.takes == ALL and self._queries_waiting())

    def _waiting(self, lane: _Lane) -> int:
        """Inputs not yet taken that the lane's next batch may take."""
        queries = self._takes_queries(lane)
        if lane.takes == ALL and not queries:
            return self.queue_depth  # no query waits: every queued group is ingest
        return sum(len(g.inputs) - g.taken for g in self._queue if g.patient != queries and not g.future.done())

    def _worth_waiting(self, lane: _Lane) -> bool:
        # a batch with a query in it takes queries only (see _take_batch): it waits for announced
        # queries, never for ingest company; an ingest lane waits for ingest only
        if self._takes_queries(lane):
            return self._expected > 0
        if lane.takes == INGEST:
            return True  # _waiting() > 0 here: a patient group is queued
        return self._expected > 0 or any(group.patient for group in self._queue)

    def _take_batch(self, lane: _Lane) -> tuple[list[tuple[_Group[In], int, int]], bool]:
        """Inputs for the lane's next batch, and whether they are queries: the queued impatient
        groups (queries) alone, in arrival order; in a one-lane batcher only when none is
        queued, patient ones (ingest).

        A query queued behind a long recording's hundreds of windows would otherwise wait for all
        of them (seconds of search latency during an ingest), and a query batch topped up with
        ingest windows would take as long as a full ingest batch instead of one window's time.
        While queries keep coming (one in the last ``QUERIED_RECENTLY_S``), ingest batches are
        also kept to ``ingest_batch_while_queried``: with one lane a query that arrives while one
        runs waits for that batch, so a smaller batch bounds its wait."""
        queries = self._takes_queries(lane)
        if queries and self._queries_waiting():
            self._last_query_at = time.monotonic()
        room = self._room(lane)
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
        return slices, queries

    def _queries_waiting(self) -> bool:
        """Whether an impatient group (a query) has inputs no batch has taken yet."""
        return any(not g.patient and g.taken < len(g.inputs) and not g.future.done() for g in self._queue)

    def _room(self, lane: _Lane) -> int:
        """The lane's next batch's size limit: ``ingest_batch_while_queried`` for ingest while
        queries keep coming (see :meth:`_take_batch`), else ``max_batch_size``."""
        if self._takes_queries(lane) or not self.queried_recently():
            return self.max_batch_size
        return self.ingest_batch_while_queried

    def _drop_cancelled(self) -> None:
        # a client that went away should not cost model time, nor hold a place in the queue (a lane
        # that takes only the other kind would never reach it)
        if any(group.future.done() for group in self._queue):
            self._queue = deque(group for group in self._queue if not group.future.done())

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
