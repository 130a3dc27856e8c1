"""The limit on unfinished ingest jobs: a batch over it answers 429 instead of queueing without end.

Jobs run one at a time per process, and each holds its files in the catalog until it ends, so an
unbounded queue is unbounded disk and an ever-later answer. The gate counts the unfinished
(queued or running) jobs in the catalog, and admits a new one in the same transaction
(app/storage/job_rows.py ``create_job_if_room``): with the embedded catalog that is this
process's queue; with a shared PostgreSQL catalog it is the whole cluster's, so
``limits.max_pending_jobs`` holds across API replicas (their admissions take turns on an
advisory lock, so two cannot both take the last place).
"""

from __future__ import annotations

from typing import Any

from app.errors import Overloaded
from app.media.decode import Upload

RETRY_AFTER_S = "5"  # a job of a few hundred files takes seconds to minutes; polling sooner gains nothing


class JobGate:
    def __init__(self, limit: int) -> None:
        self.limit = limit

    def submit(self, jobs: Any, collection: str, uploads: list[Upload]) -> dict[str, Any]:
        """The accepted job's state, or 429 with Retry-After when ``limit`` jobs are unfinished."""
        job, pending = jobs.submit(collection, uploads, max_pending=self.limit)
        if job is None:
            raise Overloaded(
                f"{pending} ingest jobs are still queued or running (limits.max_pending_jobs = {self.limit}); "
                f"retry once one finishes, or send smaller batches with wait=true",
                details={"pending_jobs": pending}, retry_after=RETRY_AFTER_S)
        return job
