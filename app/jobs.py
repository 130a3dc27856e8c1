"""Background ingest jobs that survive a restart.

A job's files are written to ``data/jobs/<id>/`` and fsynced before the 202 answer, so an
accepted job is never lost: on startup unfinished jobs are resumed (re-ingesting a file is an
upsert, so redoing the last chunk is harmless). Progress lives in ``state.json``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from app.errors import NotFound
from app.ingest import Upload, ingest
from app.services import Services
from app.worker.tasks import cancel_and_wait

log = logging.getLogger(__name__)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as handle:
        json.dump(obj, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class JobRunner:
    """Accepts ingest jobs, runs them one at a time in the background, reports progress."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.root = services.data_dir / "jobs"
        self.root.mkdir(parents=True, exist_ok=True)
        self.states: dict[str, dict[str, Any]] = {}
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        for directory in sorted(self.root.iterdir(), key=lambda p: p.stat().st_mtime):
            state_path = directory / "state.json"
            if not state_path.is_file():
                shutil.rmtree(directory, ignore_errors=True)  # died before the 202: never acknowledged
                continue
            state = json.loads(state_path.read_text())
            self.states[state["id"]] = state
            if state["status"] in ("queued", "running"):
                log.info("resuming ingest job %s", state["id"])
                state["status"] = "queued"
                self._queue.put_nowait(state["id"])
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    def submit(self, collection: str, uploads: list[Upload]) -> dict[str, Any]:
        """Persist the files, then queue the job; returns its public state."""
        job_id = uuid.uuid4().hex[:16]
        directory = self.root / job_id
        directory.mkdir()
        files = []
        for n, upload in enumerate(uploads):
            path = directory / f"{n}.bin"
            with open(path, "wb") as handle:
                handle.write(upload.data)
                handle.flush()
                os.fsync(handle.fileno())
            files.append({"path": path.name, "filename": upload.filename, "id": upload.id, "metadata": upload.metadata})
        state = {
            "id": job_id, "collection": collection, "status": "queued", "total": len(uploads), "done": 0,
            "indexed": 0, "errors": [], "created_at": time.time(), "finished_at": None, "files": files,
        }
        _write_json(directory / "state.json", state)
        self.states[job_id] = state
        self._queue.put_nowait(job_id)
        return self.public(job_id)

    def public(self, job_id: str) -> dict[str, Any]:
        if job_id not in self.states:
            raise NotFound(f"no job {job_id!r}")
        return {k: v for k, v in self.states[job_id].items() if k != "files"}

    async def _loop(self) -> None:
        while True:
            job_id = await self._queue.get()
            try:
                await self._run(job_id)
            except Exception as exc:  # noqa: BLE001 - a failed job is reported, the runner goes on
                log.exception("job %s failed", job_id)
                self._finish(job_id, "failed", error=str(exc))

    async def _run(self, job_id: str) -> None:
        state = self.states[job_id]
        directory = self.root / job_id
        state["status"] = "running"
        collection = self.services.state(state["collection"])
        uploads = [
            Upload(f["filename"], (directory / f["path"]).read_bytes(), f["id"], f["metadata"]) for f in state["files"]
        ]

        def progress(done: int, errors: list[dict[str, Any]]) -> None:
            state["done"], state["errors"] = done, errors
            _write_json(directory / "state.json", state)

        report = await ingest(self.services, collection, uploads, progress)
        state["indexed"] = len(report.indexed)
        state["errors"] = report.errors
        self._finish(job_id, "completed")

    def _finish(self, job_id: str, status: str, error: str | None = None) -> None:
        state = self.states[job_id]
        state.update(status=status, finished_at=time.time(), done=state["total"] if status == "completed" else state["done"])
        if error:
            state["error"] = error
        directory = self.root / job_id
        # the files are in the catalog now; keep only the small state file for GET /v1/jobs/{id}
        for f in state["files"]:
            (directory / f["path"]).unlink(missing_ok=True)
        _write_json(directory / "state.json", state)
