"""Embedding workers on Ray: ingest encodes spread over actors, on GPUs when the cluster has them.

Queries stay in the API process (a round trip to another node would cost more than encoding
one clip). Ingest encodes (``patient=True``) are cut into batches of
``batching.max_batch_size`` inputs, the same batches the in-process pool forms, and the
batches go round-robin to ``cluster.embed_workers`` actors; each worker has a dynamic batcher
in front of it, so concurrent ingests still share model calls, and one large ingest keeps
every worker busy at once.

Each worker is one GPU (``num_gpus=1``, encoder on CUDA) when the Ray cluster reports GPUs,
else ``cluster.embed_cpus`` CPUs. Encoding is a pure function of its input, so Ray may retry a
batch whose worker died (``max_task_retries``) on the restarted worker: a killed worker delays
an ingest, and since nothing is committed before every window is encoded, it cannot leave half
an item visible.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import uuid
from typing import Any, Sequence

import numpy as np

from app.cluster.ray_runtime import NAMESPACE, ensure_ray
from app.encoders.base import Embeddings
from app.worker.batcher import DynamicBatcher
from app.worker.encoding import EncoderPool, _stack

log = logging.getLogger(__name__)

WORKER_TIMEOUT_S = 600.0


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
        import ray

        ensure_ray(ray_address)
        gpus = ray.cluster_resources().get("GPU", 0) >= 1
        options: dict[str, Any] = {"max_restarts": -1, "max_task_retries": 3}
        options.update({"num_gpus": 1} if gpus else {"num_cpus": cpus})
        remote = ray.remote(EmbedWorker)
        owner = f"{os.getpid()}-{uuid.uuid4().hex[:6]}"  # workers belong to this API process (not detached)
        self.workers = [
            remote.options(name=f"embed:{owner}:{n}", namespace=NAMESPACE, **options).remote(
                list(extra_dirs), "cuda" if gpus else "cpu", torch_threads)
            for n in range(workers)
        ]
        self.placement = "gpu" if gpus else "cpu"
        self._remote_batchers: dict[tuple[str, int], DynamicBatcher[Any, Any]] = {}
        self._next = itertools.count()
        log.info("embedding on %d Ray worker(s), %s", workers, self.placement)

    async def encode(self, name: str, inputs: Sequence[Any], *, patient: bool = True) -> Embeddings:
        if not patient or not inputs:
            return await super().encode(name, inputs, patient=patient)  # queries: here, now
        encoder = await self.load(name)  # validates the name; its dims shape the output
        key = self.canonical(name)
        size = self.batching.max_batch_size
        chunks = [list(inputs[i : i + size]) for i in range(0, len(inputs), size)]
        start = next(self._next)
        parts = await asyncio.gather(*(
            self._remote_batcher(key, (start + n) % len(self.workers)).submit_many(chunk) for n, chunk in enumerate(chunks)
        ))
        return _stack([row for part in parts for row in part], encoder)

    def _remote_batcher(self, key: str, worker: int) -> DynamicBatcher[Any, Any]:
        if (key, worker) not in self._remote_batchers:
            actor = self.workers[worker]

            def run(batch: list[Any], actor: Any = actor) -> list[Any]:
                import ray

                floats, codes = ray.get(actor.encode.remote(key, batch), timeout=WORKER_TIMEOUT_S)
                return list(zip(floats, codes))

            self._remote_batchers[(key, worker)] = DynamicBatcher(
                run, max_batch_size=self.batching.max_batch_size, max_wait_s=self.batching.max_wait_ms / 1000,
                max_queue=self.batching.max_queue, name=f"{key}:ray{worker}",
            )
        return self._remote_batchers[(key, worker)]

    def queue_depths(self) -> dict[str, int]:
        return {**super().queue_depths(), **{b.name: b.queue_depth for b in self._remote_batchers.values()}}

    def batchers(self) -> list[DynamicBatcher[Any, Any]]:
        return [*super().batchers(), *self._remote_batchers.values()]

    async def stop(self) -> None:
        await super().stop()
        for batcher in self._remote_batchers.values():
            await batcher.stop()
        import ray

        for actor in self.workers:
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
