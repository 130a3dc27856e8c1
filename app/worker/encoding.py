"""Encoders loaded once, each behind dynamic batchers that run model work on their own thread."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable, Sequence

import numpy as np
import torch

from app.encoders.base import Embeddings, Encoder, check_embeddings
from app.encoders.registry import EncoderSpec, UnknownEncoder, create_encoder, is_versioned
from app.encoders.side_thread import in_flight
from app.errors import BackendError, Conflict, InvalidInput
from app.settings import BatchingSettings
from app.worker.batcher import Announcement, DynamicBatcher

log = logging.getLogger(__name__)

Row = tuple[np.ndarray, np.ndarray]  # (float vector, packed code) of one input

# Batches that hold a query, and any batch up to SMALL_BATCH inputs, run on one intra-op thread.
# Measured on the 2-core machine: the speech model encodes one window in 3.8 ms on one thread and
# 5.1 ms on two (9.2 ms of CPU: the second thread mostly spins), 16 windows gain nothing from a
# second thread, and with the machine busy (load 10) a batch of 32 took 460 ms and 230 ms of CPU
# on two threads against 80-150 ms and 60 ms on one. That core is better spent parsing and
# decoding the next requests. Other large batches (ingest) use the configured ``torch_threads``.
# torch's thread count is per OS thread (OpenMP), so each batcher thread sets its own.
# While queries keep coming, ingest batches run on one thread too: the other core is the queries'
# (with a query lane, a query batch runs beside the ingest batch in flight).
SMALL_BATCH = 16


class EncoderPool:
    """Loads encoders by name on first use and batches every call to them.

    Each encoder gets one batcher for its own modality and, when it embeds text, one for text;
    concurrent requests share batches, so N simultaneous queries cost fewer than N model calls.
    """

    def __init__(
        self,
        specs: dict[str, EncoderSpec],
        device: str,
        batching: BatchingSettings,
        on_batch: Callable[[str, int], None] | None = None,
    ) -> None:
        self.specs = specs
        self.device = device
        self.batching = batching
        self.on_batch = on_batch
        self.encoders: dict[str, Encoder] = {}
        self._batchers: dict[tuple[str, str], DynamicBatcher[Any, Row]] = {}
        self._load_lock = asyncio.Lock()

    # --- loading --------------------------------------------------------------------------

    def spec(self, name: str) -> EncoderSpec:
        if name not in self.specs:
            if is_versioned(name):
                base, version = name.split("@", 1)
                raise Conflict(
                    f"this collection was embedded with encoder {base!r} version {version}, which this service does not "
                    f"have (it has {base!r} version {self.specs[base].version if base in self.specs else 'none'}); add "
                    "that checkpoint's directory to RECALL_ENCODERS__EXTRA_DIRS, or re-embed the collection into a new one "
                    "with `recall reembed SOURCE TARGET` (it reads the stored originals)")
            raise InvalidInput(f"unknown encoder {name!r}; available: {sorted(n for n in self.specs if not is_versioned(n))}")
        return self.specs[name]

    def canonical(self, name: str) -> str:
        """One loaded copy per checkpoint: ``name@version`` of the current default checkpoint is ``name``."""
        if is_versioned(name):
            base = name.split("@", 1)[0]
            if base in self.specs and self.specs.get(name) is self.specs[base]:
                return base
        return name

    async def load(self, name: str) -> Encoder:
        """The encoder named ``name``, loaded on first use (off the event loop)."""
        name = self.canonical(name)
        if name in self.encoders:
            return self.encoders[name]
        async with self._load_lock:
            if name not in self.encoders:
                self.spec(name)
                try:
                    encoder = await asyncio.to_thread(create_encoder, name, self.specs, self.device)
                except UnknownEncoder as exc:
                    raise InvalidInput(str(exc)) from exc
                self.encoders[name] = encoder
                log.info("loaded encoder %s on %s", name, self.device)
        return self.encoders[name]

    # --- batched calls --------------------------------------------------------------------

    async def encode(self, name: str, inputs: Sequence[Any], *, patient: bool = True) -> Embeddings:
        """Embed inputs; ``patient=False`` for queries (see :class:`DynamicBatcher`)."""
        encoder = await self.load(name)
        return _stack(await self._batcher(encoder, "encode").submit_many(list(inputs), patient=patient), encoder)

    def expecting(self, name: str) -> Announcement | None:
        """Announce an ``encode`` call on its way (a query being received and decoded):
        concurrent queries then share a batch, while a lone query still goes to the model at
        once. None when the encoder is not loaded yet (nothing to batch with)."""
        encoder = self.encoders.get(self.canonical(name))
        return self._batcher(encoder, "encode").expecting() if encoder is not None else None

    async def encode_text(self, name: str, texts: Sequence[str], *, patient: bool = True) -> Embeddings:
        encoder = await self.load(name)
        if not encoder.supports_text:
            raise InvalidInput(f"encoder {name!r} cannot embed text; text search needs an image-text encoder")
        return _stack(await self._batcher(encoder, "text").submit_many(list(texts), patient=patient), encoder)

    async def rerank(self, name: str, text: str, image_floats: np.ndarray) -> np.ndarray:
        encoder = await self.load(name)
        if not encoder.supports_rerank:
            raise InvalidInput(f"encoder {name!r} has no relevance head; search with rerank=false")
        # one call per query (its candidates are the batch), on the text batcher's thread
        batcher = self._batcher(encoder, "rerank")
        return (await batcher.submit((text, image_floats), patient=False))[0]

    def rerank_here(self, encoder: Encoder, text: str, image_floats: np.ndarray) -> np.ndarray:
        """:meth:`rerank` on the calling worker thread: a text search's head call right after its index search,
        in the same thread call, without the two hops through the batcher's loop and thread (issue 35: ~0.1 ms
        of a lone query, and GIL hand-offs at 16 clients). The same scores bit for bit: one intra-op thread,
        as the batcher's query batch sets (``_ThreadCount``), one call per query, as there."""
        if not encoder.supports_rerank:
            raise InvalidInput(f"encoder {encoder.name!r} has no relevance head; search with rerank=false")
        before = torch.get_num_threads()  # per OS thread: a pool thread's own setting, put back after
        torch.set_num_threads(1)
        try:
            (scores,) = _run_rerank(encoder, [(text, image_floats)])[0]
        finally:
            torch.set_num_threads(before)
        if self.on_batch is not None:
            self.on_batch(f"{encoder.name}:rerank", 1)  # the batch the batcher would have counted
        return scores

    def _batcher(self, encoder: Encoder, op: str) -> DynamicBatcher[Any, Row]:
        key = (encoder.name, encoder.version, op)  # two versions of one name never share a model call
        if key not in self._batchers:
            run = {"encode": _run_encode, "text": _run_text, "rerank": _run_rerank}[op]
            size = 1 if op == "rerank" else self.batching.max_batch_size
            threads = _ThreadCount(torch.get_num_threads())  # the configured count, read on the loop's thread
            self._batchers[key] = threads.batcher = DynamicBatcher(
                lambda batch, run=run, threads=threads: threads.run(run, encoder, batch),
                max_batch_size=size,
                max_wait_s=self.batching.max_wait_ms / 1000,
                max_queue=self.batching.max_queue,
                query_lane=self.batching.query_lane and op != "rerank",  # rerank: queries only
                ingest_batch_while_queried=self.batching.ingest_batch_while_queried or None,
                ingest_nice=self.batching.ingest_nice,
                name=f"{encoder.name}:{op}",
                on_batch=(lambda n, label=f"{encoder.name}:{op}": self.on_batch(label, n)) if self.on_batch else None,
            )
        return self._batchers[key]

    def queue_depths(self) -> dict[str, int]:
        return {batcher.name: batcher.queue_depth for batcher in self._batchers.values()}

    def batchers(self) -> list[DynamicBatcher[Any, Row]]:
        return list(self._batchers.values())

    async def stop(self) -> None:
        for batcher in self._batchers.values():
            await batcher.stop()


class _ThreadCount:
    """Sets the calling (batcher) thread's torch intra-op threads for each batch: one for a query
    batch, a small batch, or any batch while queries keep coming; else the configured count."""

    def __init__(self, configured: int) -> None:
        self.configured = configured
        self._thread = threading.local()  # the count set on each worker thread (a query lane has two)
        self.batcher: DynamicBatcher[Any, Any] | None = None

    def fit(self, batch: list[Any]) -> list[Any]:
        batcher = self.batcher
        busy = batcher is not None and (batcher.batch_has_query or batcher.queried_recently())
        wanted = 1 if busy or len(batch) <= SMALL_BATCH else self.configured
        if wanted != getattr(self._thread, "current", None):
            torch.set_num_threads(wanted)
            self._thread.current = wanted
        return batch

    def run(self, run: Callable[[Encoder, list[Any]], list[Any]], encoder: Encoder, batch: list[Any]) -> list[Any]:
        self.fit(batch)
        batcher = self.batcher
        if batcher is not None and batcher.query_lane and not batcher.batch_has_query:
            # an ingest batch that a query batch may run beside: counted as a request in flight, so
            # the query's model keeps to its own thread instead of splitting onto a side thread
            # (app/encoders/side_thread.py) for a core the ingest already holds
            with in_flight():
                return run(encoder, batch)
        return run(encoder, batch)


def _rows(emb: Embeddings, encoder: Encoder, n: int) -> list[Row]:
    try:
        check_embeddings(emb, n=n, dim=encoder.dim, bits=encoder.bits)
    except ValueError as exc:
        raise BackendError(f"encoder {encoder.name!r} produced bad output: {exc}") from exc
    return list(zip(emb.floats, emb.codes))


def _run_encode(encoder: Encoder, batch: list[Any]) -> list[Row]:
    with torch.inference_mode():
        return _rows(encoder.encode(batch), encoder, len(batch))


def _run_text(encoder: Encoder, batch: list[str]) -> list[Row]:
    with torch.inference_mode():
        return _rows(encoder.encode_text(batch), encoder, len(batch))


def _run_rerank(encoder: Encoder, batch: list[tuple[str, np.ndarray]]) -> list[Any]:
    with torch.inference_mode():
        return [(np.asarray(encoder.rerank(text, floats), dtype=np.float32),) for text, floats in batch]


def _stack(rows: list[Row], encoder: Encoder) -> Embeddings:
    if not rows:
        return Embeddings(np.zeros((0, encoder.dim), np.float32), np.zeros((0, encoder.bits // 8), np.uint8))
    return Embeddings(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]))
