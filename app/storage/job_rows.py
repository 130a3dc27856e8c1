"""Ingest jobs in the catalog: accepted files, progress, and which process is running each.

A job and its files are inserted in one transaction before the 202 answer, so an accepted job
survives the death of the process that took it. Any API process sharing the catalog may run it:
a runner claims a job with a lease (``owner``, ``lease_until``) that it renews while working;
a job whose lease ran out (its runner died) is claimed again by another. Re-ingesting a file
is an upsert, so redoing a partly done chunk is harmless.
"""

from __future__ import annotations

import json
from typing import Any

JOB_ADMISSION_LOCK = 0x4A4F4253  # "JOBS": the advisory lock PostgreSQL admissions of new jobs take turns on


class JobRows:
    """Job queries; mixed into the SQL catalog (which supplies ``_execute``, ``_transaction``, ``_lock``)."""

    _skip_locked = ""  # PostgreSQL: " FOR UPDATE SKIP LOCKED", so two runners never claim one job

    def create_job(self, job_id: str, collection: str, files: list[tuple[str, str | None, dict[str, Any], bytes]], now: float,
                   total: int | None = None) -> None:
        """Store a queued job and its files (filename, item id, metadata, bytes) in one transaction.

        ``total`` defaults to the number of files (an imported, finished job has none left)."""
        with self._lock, self._transaction():  # type: ignore[attr-defined]
            self._insert_job(job_id, collection, files, now, total)

    def create_job_if_room(self, job_id: str, collection: str, files: list[tuple[str, str | None, dict[str, Any], bytes]],
                           now: float, limit: int) -> int | None:
        """:meth:`create_job` unless ``limit`` jobs are unfinished; then their number, and nothing stored.

        Count and insert are one transaction, and on PostgreSQL every process's admissions take
        turns on an advisory lock, so ``limits.max_pending_jobs`` holds for the whole cluster
        (two replicas admitting at once cannot both take the last place)."""
        with self._lock, self._transaction():  # type: ignore[attr-defined]
            if self.dialect == "postgres":  # type: ignore[attr-defined]
                self._execute("SELECT pg_advisory_xact_lock(?)", (JOB_ADMISSION_LOCK,))  # type: ignore[attr-defined]
            pending = int(self._one("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')")[0])  # type: ignore[attr-defined]
            if pending >= limit:
                return pending
            self._insert_job(job_id, collection, files, now, None)
        return None

    def _insert_job(self, job_id: str, collection: str, files: list[tuple[str, str | None, dict[str, Any], bytes]], now: float,
                    total: int | None) -> None:
        self._execute(  # type: ignore[attr-defined]
            "INSERT INTO jobs (id, collection, status, total, done, indexed, errors, created_at)"
            " VALUES (?, ?, 'queued', ?, 0, 0, '[]', ?)",
            (job_id, collection, len(files) if total is None else total, now),
        )
        for n, (filename, item_id, metadata, data) in enumerate(files):
            self._execute(  # type: ignore[attr-defined]
                "INSERT INTO job_files (job_id, n, filename, item_id, metadata, data) VALUES (?,?,?,?,?,?)",
                (job_id, n, filename, item_id, json.dumps(metadata), data),
            )

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        if "\x00" in job_id:  # no job id holds one, and PostgreSQL cannot compare against it
            return None
        with self._lock:  # type: ignore[attr-defined]
            row = self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))  # type: ignore[attr-defined]
        if row is None:
            return None
        job = {k: row[k] for k in ("id", "collection", "status", "total", "done", "indexed", "created_at", "finished_at")}
        job["errors"] = json.loads(row["errors"])
        if row["error"]:
            job["error"] = row["error"]
        return job

    def job_files(self, job_id: str) -> list[tuple[str, str | None, dict[str, Any], bytes]]:
        with self._lock:  # type: ignore[attr-defined]
            rows = self._rows(  # type: ignore[attr-defined]
                "SELECT filename, item_id, metadata, data FROM job_files WHERE job_id = ? ORDER BY n", (job_id,))
        return [(r[0], r[1], json.loads(r[2]), bytes(r[3])) for r in rows]

    def claim_job(self, owner: str, now: float, lease_s: float) -> str | None:
        """Take the oldest queued job, or a running one whose runner stopped renewing its lease."""
        with self._lock, self._transaction():  # type: ignore[attr-defined]
            row = self._one(  # type: ignore[attr-defined]
                "SELECT id FROM jobs WHERE status = 'queued' OR (status = 'running' AND lease_until < ?)"
                f" ORDER BY created_at LIMIT 1{self._skip_locked}",
                (now,),
            )
            if row is None:
                return None
            self._execute(  # type: ignore[attr-defined]
                "UPDATE jobs SET status = 'running', owner = ?, lease_until = ? WHERE id = ?", (owner, now + lease_s, row[0]))
        return str(row[0])

    def renew_job(self, job_id: str, owner: str, until: float, done: int | None = None, errors: list | None = None) -> bool:
        """Extend a lease (and record progress); False when another runner has taken the job over."""
        sets, params = ["lease_until = ?"], [until]
        if done is not None:
            sets.append("done = ?")
            params.append(done)
        if errors is not None:
            sets.append("errors = ?")
            params.append(json.dumps(errors))
        with self._lock:  # type: ignore[attr-defined]
            cur = self._execute(  # type: ignore[attr-defined]
                f"UPDATE jobs SET {', '.join(sets)} WHERE id = ? AND owner = ? AND status = 'running'", (*params, job_id, owner))
        return cur.rowcount == 1

    def finish_job(self, job_id: str, status: str, now: float, *, indexed: int | None = None,
                   errors: list | None = None, error: str | None = None, done: int | None = None) -> None:
        """Record the outcome and drop the files (they are in the catalog now), in one transaction."""
        with self._lock, self._transaction():  # type: ignore[attr-defined]
            row = self._one("SELECT total, done, indexed, errors FROM jobs WHERE id = ?", (job_id,))  # type: ignore[attr-defined]
            if row is None:
                return
            self._execute(  # type: ignore[attr-defined]
                "UPDATE jobs SET status = ?, finished_at = ?, done = ?, indexed = ?, errors = ?, error = ?,"
                " owner = NULL, lease_until = NULL WHERE id = ?",
                (status, now, row[0] if done is None else done, row[2] if indexed is None else indexed,
                 row[3] if errors is None else json.dumps(errors), error, job_id),
            )
            self._execute("DELETE FROM job_files WHERE job_id = ?", (job_id,))  # type: ignore[attr-defined]

    def release_job(self, job_id: str, owner: str) -> bool:
        """Put a job its runner could not finish back in the queue (the catalog failed mid-job); False
        when another runner holds it now. Any runner may claim it again at once, no lease to wait out."""
        with self._lock:  # type: ignore[attr-defined]
            cur = self._execute(  # type: ignore[attr-defined]
                "UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL WHERE id = ? AND owner = ? AND status = 'running'",
                (job_id, owner))
        return cur.rowcount == 1

    def requeue_running_jobs(self) -> int:
        """Put every running job back in the queue: only for a catalog that one process owns (SQLite)."""
        with self._lock:  # type: ignore[attr-defined]
            cur = self._execute("UPDATE jobs SET status = 'queued', owner = NULL, lease_until = NULL WHERE status = 'running'")  # type: ignore[attr-defined]
        return int(cur.rowcount)
