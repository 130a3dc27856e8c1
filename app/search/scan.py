"""Shared index scans: concurrent searches of one index are answered by one batched scan.

A scan over a large index is bound by memory bandwidth, and FAISS reads the database once per
call whatever the number of queries, so 16 queries in one call cost little more than one.
The batcher waits for no one (``max_wait_s=0``): queries that arrive while a scan runs simply
form the next batch, so a lone query pays no extra latency. A query may carry an IVF ``nprobe``
(app/index/adaptive.py); one batch then makes one index call per distinct nprobe.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from app.worker.batcher import DynamicBatcher


class SharedScan:
    """Batch (query vector, k) pairs into single ``index.search`` calls."""

    def __init__(self, index: Any, name: str, max_batch_size: int = 64, max_queue: int = 4096) -> None:
        self.index = index
        self._batcher: DynamicBatcher[tuple[np.ndarray, int, int | None], tuple[np.ndarray, np.ndarray]] = DynamicBatcher(
            self._run, max_batch_size=max_batch_size, max_wait_s=0.0, max_queue=max_queue, name=f"scan:{name}"
        )

    def _run(self, batch: list[tuple[np.ndarray, int, int | None]]) -> list[tuple[np.ndarray, np.ndarray]]:
        out: list[tuple[np.ndarray, np.ndarray]] = [None] * len(batch)  # type: ignore[list-item]
        for nprobe in {p for _, _, p in batch}:
            members = [i for i, (_, _, p) in enumerate(batch) if p == nprobe]
            k = max(batch[i][1] for i in members)
            queries = np.stack([batch[i][0] for i in members])
            # only an IVF-capable index (in process or cluster shards) takes nprobe; the float index never gets one
            scores, ids = self.index.search(queries, k) if nprobe is None else self.index.search(queries, k, nprobe=nprobe)
            for row, i in enumerate(members):
                out[i] = (scores[row, : batch[i][1]], ids[row, : batch[i][1]])
        return out

    async def search(self, queries: np.ndarray, k: int, nprobe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores (nq, k), ids (nq, k)) for each query row, as ``index.search`` returns them."""
        rows = await self._batcher.submit_many([(q, k, nprobe) for q in queries])
        return np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows])

    async def stop(self) -> None:
        await self._batcher.stop()
