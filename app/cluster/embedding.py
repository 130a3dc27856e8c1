"""Embedding workers on Ray: ingest encodes spread over actors, on GPUs when the cluster has them.

Queries stay in the API process (a round trip to another node would cost more than encoding
one clip). Ingest encodes (``patient=True``) are cut into batches of
``batching.max_batch_size`` inputs, the same batches the in-process pool forms (fewer where the
answer would pass Ray's inline size, see :func:`remote_batch_size`), and the batches go round-robin to ``cluster.embed_workers`` actors; each worker has a dynamic batcher
in front of it, so concurrent ingests still share model calls, and one large ingest keeps
every worker busy at once.

Each worker is one GPU (``num_gpus=1``, encoder on CUDA) when the Ray cluster reports GPUs,
else ``cluster.embed_cpus`` CPUs. Encoding is a pure function of its input, so Ray may retry a
batch whose worker died (``max_task_retries``) on the restarted worker: a killed worker delays
an ingest, and since nothing is committed before every window is encoded, it cannot leave half
an item visible.

The workers live and die with the Ray cluster they were started on. While its head cannot be
reached, an ingest encode answers 503 with Retry-After (``RayUnavailable``) at once rather than
waiting on workers that are gone, and a batch in flight gives up within ``POLL_S``, so the process
can leave the lost cluster (app/cluster/ray_runtime.py). A restarted head is a new, empty cluster:
the workers are started again on it when it is rejoined, and by the first batch sent to them under
a newer connection (:func:`~app.cluster.ray_runtime.generation`) should that come first.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
import uuid
from typing import Any, Sequence

import numpy as np

from app.cluster import ray_runtime
from app.cluster.ray_runtime import GATE, NAMESPACE, RayUnavailable, Reconnecting, ensure_ray
from app.encoders.base import Embeddings
from app.worker.batcher import DynamicBatcher
from app.worker.encoding import EncoderPool, _stack

log = logging.getLogger(__name__)

WORKER_TIMEOUT_S = 600.0
POLL_S = 0.5  # how soon a batch in flight notices that the head is lost or Ray is being left
# A worker's answer above Ray's 100 KiB (max_direct_call_object_size, the worker's default) is put in its
# node's object store and fetched through this node's raylet, which, on the head's machine, dies with the
# head and ends this process when asked: batches sent to workers are cut so their answers stay below it.
# (Their arguments travel inside the call: app/cluster/ray_connect.INLINE_ARGS_BYTES.)
ANSWER_INLINE_BYTES = 96 * 1024


class EmbedWorker:
    """A Ray actor holding encoders (loaded on first use) on its own device."""

    def __init__(self, extra_dirs: list[str], device: str, torch_threads: int) -> None:
        from app.encoders.registry import discover
        from app.encoders.runtime import configure_torch

        configure_torch(torch_threads)
        self.specs = discover(extra_dirs)
        self.device = device
        self.encoders: dict[str, Any] = {}
        self.batches = 0

    def encode(self, name: str, inputs: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        import torch

        from app.encoders.registry import create_encoder

        if name not in self.encoders:
            self.encoders[name] = create_encoder(name, self.specs, self.device)
        with torch.inference_mode():
            emb = self.encoders[name].encode(inputs)
        self.batches += 1
        return np.asarray(emb.floats, np.float32), np.asarray(emb.codes, np.uint8)

    def where(self) -> dict[str, Any]:
        import os

        return {"pid": os.getpid(), "device": self.device, "batches": self.batches}


class RayEncoderPool(EncoderPool):
    """An :class:`EncoderPool` whose ingest encodes run on Ray workers."""

    def __init__(self, *args: Any, ray_address: str, workers: int, cpus: float, extra_dirs: list[str], torch_threads: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        ensure_ray(ray_address)
        self._count, self._cpus, self._extra_dirs, self._torch_threads = workers, cpus, list(extra_dirs), torch_threads
        self._workers_lock = threading.Lock()
        self._generation = -1  # the Ray connection the workers were started under
        self.workers: list[Any] = []
        self.placement = "cpu"
        self._start_workers()
        self._remote_batchers: dict[tuple[str, int], DynamicBatcher[Any, Any]] = {}
        self._next = itertools.count()

    def _start_workers(self) -> None:
        """Start the workers on the cluster this process is joined to now (called holding the lock or from __init__)."""
        import ray

        gpus = ray.cluster_resources().get("GPU", 0) >= 1
        options: dict[str, Any] = {"max_restarts": -1, "max_task_retries": 3}
        options.update({"num_gpus": 1} if gpus else {"num_cpus": self._cpus})
        remote = ray.remote(EmbedWorker)
        owner = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"  # workers belong to this API process (not detached)
        self.workers = [
            remote.options(name=f"embed:{owner}:{n}", namespace=NAMESPACE, **options).remote(
                self._extra_dirs, "cuda" if gpus else "cpu", self._torch_threads)
            for n in range(self._count)
        ]
        self._generation = ray_runtime.generation()
        self.placement = "gpu" if gpus else "cpu"
        log.info("embedding on %d Ray worker(s), %s", self._count, self.placement)

    def reopen_workers(self) -> None:
        """Start the workers again if the process has joined another Ray cluster since (a restarted head)."""
        with GATE.use(), self._workers_lock:
            if self._generation != ray_runtime.generation():
                self._start_workers()

    def _worker(self, number: int) -> Any:
        self.reopen_workers()
        return self.workers[number]

    async def encode(self, name: str, inputs: Sequence[Any], *, patient: bool = True) -> Embeddings:
        if not patient or not inputs:
            return await super().encode(name, inputs, patient=patient)  # queries: here, now
        encoder = await self.load(name)  # validates the name; its dims shape the output
        key = self.canonical(name)
        size = remote_batch_size(self.batching.max_batch_size, encoder.dim, encoder.bits)
        chunks = [list(inputs[i : i + size]) for i in range(0, len(inputs), size)]
        start = next(self._next)
        parts = await asyncio.gather(*(
            self._remote_batcher(key, (start + n) % len(self.workers), size).submit_many(chunk) for n, chunk in enumerate(chunks)
        ))
        return _stack([row for part in parts for row in part], encoder)

    def _remote_batcher(self, key: str, worker: int, size: int) -> DynamicBatcher[Any, Any]:
        if (key, worker) not in self._remote_batchers:
            def run(batch: list[Any], worker: int = worker) -> list[Any]:
                floats, codes = self._encode_remote(worker, key, batch)
                return list(zip(floats, codes))

            self._remote_batchers[(key, worker)] = DynamicBatcher(
                run, max_batch_size=size, max_wait_s=self.batching.max_wait_ms / 1000,
                max_queue=self.batching.max_queue, name=f"{key}:ray{worker}",
            )
        return self._remote_batchers[(key, worker)]

    def _encode_remote(self, worker: int, key: str, batch: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """One batch on one worker (reopened on a new head first); 503 if the head is lost before it answers."""
        import ray

        if ray_runtime.head_lost():
            raise RayUnavailable("encoding for ingest (RECALL_CLUSTER__EMBED_WORKERS)")
        try:
            with GATE.use():
                ref = self._worker(worker).encode.remote(key, batch)
                deadline = time.monotonic() + WORKER_TIMEOUT_S
                while not ray.wait([ref], timeout=POLL_S)[0]:
                    if ray_runtime.head_lost() or GATE.closed or time.monotonic() > deadline:
                        _cancel(ref)
                        if time.monotonic() > deadline:
                            raise ray.exceptions.GetTimeoutError(f"embedding worker {worker} did not answer in {WORKER_TIMEOUT_S:.0f} s")
                        raise Reconnecting("the Ray head was lost")
                return ray.get(ref)
        except Reconnecting:
            raise RayUnavailable("encoding for ingest (RECALL_CLUSTER__EMBED_WORKERS)") from None

    def queue_depths(self) -> dict[str, int]:
        return {**super().queue_depths(), **{b.name: b.queue_depth for b in self._remote_batchers.values()}}

    def batchers(self) -> list[DynamicBatcher[Any, Any]]:
        return [*super().batchers(), *self._remote_batchers.values()]

    async def stop(self) -> None:
        await super().stop()
        for batcher in self._remote_batchers.values():
            await batcher.stop()
        if self._generation != ray_runtime.generation() or not ray_runtime.connected():
            return  # started on a cluster this process has left: nothing to end
        import ray

        for actor in self.workers:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass


def remote_batch_size(max_batch_size: int, dim: int, bits: int) -> int:
    """Most inputs per call to a worker: at most the configured batch, and an answer Ray sends inline."""
    row = dim * 4 + bits // 8  # float32 embedding + packed binary code
    return max(1, min(max_batch_size, ANSWER_INLINE_BYTES // row))


def _cancel(ref: Any) -> None:
    import ray

    try:
        ray.cancel(ref)
    except Exception:  # noqa: BLE001 - its worker or its head is gone: nothing left to cancel
        pass
