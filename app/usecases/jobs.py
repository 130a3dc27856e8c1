"""Background ingest jobs that survive a restart, kept in the catalog.

A job and its files are committed to the catalog before the 202 answer, so an accepted job is
never lost. With the embedded SQLite catalog one process owns every job, and on startup the
jobs it was running are queued again. With a shared PostgreSQL catalog any API process may run
any job: runners claim jobs under a lease they renew while working, and a job whose runner
died is taken over when its lease runs out (see app/storage/job_rows.py). Re-ingesting a file
is an upsert, so redoing the last chunk is harmless. ``GET /v1/jobs/{id}`` reads the catalog,
so a job can be polled on any process.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import socket
import time
import uuid
from typing import Any

from app.errors import NotFound
from app.media.decode import Upload
from app.usecases.ingest import ingest
from app.usecases.services import Services
from app.worker.tasks import cancel_and_wait

log = logging.getLogger(__name__)

POLL_S = 0.5  # how often an idle runner looks for jobs submitted to other processes
MIN_BACKOFF_S = 0.5  # after a job met an unavailable catalog: the first wait before claiming again
MAX_BACKOFF_S = 30.0  # ... doubling up to this (a PostgreSQL restart takes seconds, a failover longer)
# a retry will do: app/storage/postgres.py CatalogUnavailable, app/cluster/ray_runtime.py RayUnavailable (head lost)
TRANSIENT_CODES = {"catalog_unavailable", "ray_unavailable", "collection_opening"}


def transient(exc: BaseException) -> bool:
    """An error that says nothing about the job itself (its catalog is briefly away): retry, do not fail it."""
    return getattr(exc, "code", None) in TRANSIENT_CODES


class JobRunner:
    """Accepts ingest jobs, runs them one at a time in the background, reports progress."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.catalog = services.catalog
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.lease_s = services.settings.cluster.job_lease_s  # silent this long: presumed dead, taken over
        self._backoff_s = 0.0  # grows while jobs keep meeting an unavailable catalog (_retry_later)
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        if not self.services.shared:
            await asyncio.to_thread(self._import_legacy_jobs)
            # the embedded catalog has one owner: whatever it was running died with the last process
            resumed = await asyncio.to_thread(self.catalog.requeue_running_jobs)
            if resumed:
                log.info("resuming %d ingest job(s)", resumed)
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def _import_legacy_jobs(self) -> None:
        """Move jobs a release before this one kept under ``data/jobs/<id>/`` into the catalog.

        An accepted but unfinished job must survive the upgrade too; finished ones stay pollable.
        """
        root = self.services.data_dir / "jobs"
        if not root.is_dir():
            return
        for directory in sorted(root.iterdir()):
            state_path = directory / "state.json"
            if state_path.is_file() and self.catalog.get_job(directory.name) is None:
                state = json.loads(state_path.read_text())
                files = [(f["filename"], f["id"], f["metadata"], (directory / f["path"]).read_bytes())
                         for f in state["files"] if (directory / f["path"]).is_file()]
                self.catalog.create_job(state["id"], state["collection"], files, state["created_at"], total=state["total"])
                if state["status"] in ("completed", "failed"):
                    self.catalog.finish_job(state["id"], state["status"], state["finished_at"] or time.time(),
                                            indexed=state["indexed"], errors=state["errors"], error=state.get("error"),
                                            done=state["done"])
                log.info("imported ingest job %s (%s) from %s", state["id"], state["status"], directory)
            shutil.rmtree(directory, ignore_errors=True)  # no state.json: died before its 202, never acknowledged
        root.rmdir()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def submit(self, collection: str, uploads: list[Upload], max_pending: int | None = None) -> tuple[dict[str, Any] | None, int]:
        """Commit the job and its files, then wake the runner: (its public state, 0); with ``max_pending``
        jobs already unfinished in the catalog (the cluster's, when shared): (None, their number)."""
        job_id = uuid.uuid4().hex[:16]
        files = [(u.filename, u.id, u.metadata, u.data) for u in uploads]
        if max_pending is None:
            self.catalog.create_job(job_id, collection, files, time.time())
        elif (pending := self.catalog.create_job_if_room(job_id, collection, files, time.time(), max_pending)) is not None:
            return None, pending
        if self._wake is not None:
            self._wake.set()
        return self.public(job_id), 0

    def public(self, job_id: str) -> dict[str, Any]:
        job = self.catalog.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}")
        return job

    async def _loop(self) -> None:
        assert self._wake is not None
        while True:
            try:
                job_id = await asyncio.to_thread(self.catalog.claim_job, self.owner, time.time(), self.lease_s)
            except Exception:  # noqa: BLE001 - the catalog may be briefly unreachable
                log.exception("could not look for ingest jobs")
                job_id = None
            if job_id is None:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), POLL_S)
                except TimeoutError:
                    pass
                continue
            try:
                await self._run(job_id)
                self._backoff_s = 0.0
            except Exception as exc:  # noqa: BLE001 - a failed job is reported, the runner goes on
                if transient(exc):
                    await self._retry_later(job_id, exc)
                    continue
                log.exception("job %s failed", job_id)
                try:
                    await asyncio.to_thread(self.catalog.finish_job, job_id, "failed", time.time(), error=str(exc))
                except Exception:  # noqa: BLE001 - a full or read-only disk refuses this write too; the runner goes on
                    log.exception("job %s: could not record its failure", job_id)

    async def _run(self, job_id: str) -> None:
        job = self.public(job_id)
        files = await asyncio.to_thread(self.catalog.job_files, job_id)
        collection = self.services.state(job["collection"])
        uploads = [Upload(filename, data, item_id, metadata) for filename, item_id, metadata, data in files]

        def progress(done: int, errors: list[dict[str, Any]]) -> None:
            self.catalog.renew_job(job_id, self.owner, time.time() + self.lease_s, done, errors)

        heartbeat = asyncio.get_running_loop().create_task(self._heartbeat(job_id))
        try:
            report = await ingest(self.services, collection, uploads, progress)
        finally:
            await cancel_and_wait(heartbeat)
        await asyncio.to_thread(
            self.catalog.finish_job, job_id, "completed", time.time(),
            indexed=len(report.indexed), errors=report.errors, done=job["total"],
        )

    async def _retry_later(self, job_id: str, exc: BaseException) -> None:
        """The catalog failed mid-job (PostgreSQL restarting): the job goes back to the queue, not to 'failed'.

        Nothing of the unfinished chunk was acknowledged and redoing the committed ones is an
        upsert, so the retry is safe. The runner gives the job back (or, while the catalog is still
        away, leaves its lease to lapse, after which any runner takes it over) and waits, doubling
        the wait up to MAX_BACKOFF_S, so an outage is not met with a tight loop of claims."""
        self._backoff_s = min(MAX_BACKOFF_S, max(MIN_BACKOFF_S, 2 * self._backoff_s))
        log.warning("job %s: the catalog is unavailable (%s); retrying in %.1f s", job_id, exc, self._backoff_s)
        try:
            await asyncio.to_thread(self.catalog.release_job, job_id, self.owner)
        except Exception:  # noqa: BLE001 - still away: the lease lapses instead (cluster.job_lease_s)
            log.info("job %s: could not give it back yet; its lease will lapse", job_id)
        await asyncio.sleep(self._backoff_s)

    async def _heartbeat(self, job_id: str) -> None:
        """Renew the lease while a chunk is being encoded (a progress call comes only between chunks)."""
        while True:
            await asyncio.sleep(self.lease_s / 4)
            try:
                await asyncio.to_thread(self.catalog.renew_job, job_id, self.owner, time.time() + self.lease_s)
            except Exception as exc:  # noqa: BLE001 - a missed renewal is not the job's failure; the next one may succeed
                log.warning("job %s: could not renew its lease (%s)", job_id, exc)
