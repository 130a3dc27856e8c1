"""The limit on unfinished ingest jobs: a batch over it answers 429 instead of queueing without end.

Jobs run one at a time, and each holds its files in the catalog until it ends, so an unbounded
queue is unbounded disk and an ever-later answer. The gate counts the jobs this process accepted
that have not finished (their state is read back from the catalog, so a job another process
finished counts as finished too).
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from app.errors import Overloaded

RETRY_AFTER_S = "5"  # a job of a few hundred files takes seconds to minutes; polling sooner gains nothing
FINISHED = {"completed", "failed"}


class JobGate:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._pending: list[str] = []
        self._lock = threading.Lock()

    def admit(self, lookup: Callable[[str], dict[str, Any] | None]) -> None:
        """Raise 429 when ``limit`` jobs are unfinished; ``lookup`` reads a job's state (None: gone)."""
        with self._lock:
            self._pending = [j for j in self._pending if (job := lookup(j)) is not None and job["status"] not in FINISHED]
            if len(self._pending) >= self.limit:
                raise Overloaded(
                    f"{len(self._pending)} ingest jobs are still queued or running (limits.max_pending_jobs = {self.limit}); "
                    f"retry once one finishes, or send smaller batches with wait=true",
                    details={"pending_jobs": len(self._pending)}, retry_after=RETRY_AFTER_S)

    def add(self, job_id: str) -> None:
        with self._lock:
            self._pending.append(job_id)
