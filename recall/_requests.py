"""How each client call becomes an HTTP request, shared by the sync and async clients.

Each builder returns a :class:`Request`: method, path, httpx keyword arguments and a parser
for the successful response. The two clients differ only in how they send it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import quote

import httpx

from recall.types import IngestReport, ItemIn, Job

FileInput = str | Path | bytes | tuple[str, bytes]


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    parse: Callable[[httpx.Response], Any] = lambda r: r.json() if r.content else None
    raise_errors: bool = True  # False where an error status is itself the answer (readiness)


def _segment(value: str) -> str:
    # ids may hold '/', '?', '#' or spaces; each must stay one path segment
    return quote(value, safe="")


def _file(value: FileInput, default_name: str) -> tuple[str, bytes]:
    if isinstance(value, tuple):
        return value
    if isinstance(value, bytes):
        return default_name, value
    path = Path(value)
    return path.name, path.read_bytes()


def _form_params(params: Mapping[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in params.items():
        if key == "filter":
            out[key] = json.dumps(value)
        elif isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = str(value)
    return out


def job_report(job: Job) -> IngestReport:
    """An ingest report from a finished job (the job knows counts and errors, not per-item segments)."""
    if job["status"] == "failed":
        from app.errors import BackendError

        raise BackendError(f"ingest job {job['id']} failed: {job.get('error', 'see the service log')}")
    return {"indexed": [], "indexed_count": job["indexed"], "errors": job["errors"], "collection": job["collection"], "job": job}


class Requests:
    """Builders for every endpoint."""

    @staticmethod
    def health() -> Request:
        return Request("GET", "/healthz")

    @staticmethod
    def readiness() -> Request:
        # 503 while starting is an answer, not an error: parse it instead of raising
        return Request("GET", "/readyz", raise_errors=False)

    @staticmethod
    def metrics() -> Request:
        return Request("GET", "/metrics", parse=lambda r: r.text)

    @staticmethod
    def list_encoders() -> Request:
        return Request("GET", "/v1/encoders", parse=lambda r: r.json()["data"])

    @staticmethod
    def create_collection(name: str, modality: str, options: Mapping[str, Any]) -> Request:
        return Request("POST", "/v1/collections", {"json": {"name": name, "modality": modality, **options}})

    @staticmethod
    def list_collections() -> Request:
        return Request("GET", "/v1/collections", parse=lambda r: r.json()["data"])

    @staticmethod
    def get_collection(name: str) -> Request:
        return Request("GET", f"/v1/collections/{_segment(name)}")

    @staticmethod
    def delete_collection(name: str) -> Request:
        return Request("DELETE", f"/v1/collections/{_segment(name)}")

    @staticmethod
    def ingest(collection: str, files: Iterable[FileInput], ids: list[str] | None, metadata: list[dict[str, Any]] | None, wait: bool) -> Request:
        parts = [("files", _file(f, f"file-{n}")) for n, f in enumerate(files)]
        data: dict[str, str] = {}
        if ids:
            data["ids"] = ",".join(ids)
        if metadata:
            data["metadata"] = json.dumps(metadata)
        params = {"wait": "true" if wait else "false"}
        return Request("POST", f"/v1/collections/{_segment(collection)}/items", {"params": params, "files": parts, "data": data})

    @staticmethod
    def ingest_base64(collection: str, items: list[ItemIn]) -> Request:
        return Request("POST", f"/v1/collections/{_segment(collection)}/items", {"json": {"items": list(items)}})

    @staticmethod
    def get_job(job_id: str) -> Request:
        return Request("GET", f"/v1/jobs/{_segment(job_id)}")

    @staticmethod
    def get_item(collection: str, item_id: str) -> Request:
        return Request("GET", f"/v1/collections/{_segment(collection)}/items/{_segment(item_id)}")

    @staticmethod
    def list_items(collection: str, limit: int, offset: int) -> Request:
        return Request("GET", f"/v1/collections/{_segment(collection)}/items", {"params": {"limit": limit, "offset": offset}})

    @staticmethod
    def delete_item(collection: str, item_id: str) -> Request:
        return Request("DELETE", f"/v1/collections/{_segment(collection)}/items/{_segment(item_id)}")

    @staticmethod
    def get_media(collection: str, item_id: str) -> Request:
        path = f"/v1/collections/{_segment(collection)}/items/{_segment(item_id)}/media"
        return Request("GET", path, parse=lambda r: r.content)

    @staticmethod
    def search_file(collection: str, file: FileInput, params: Mapping[str, Any]) -> Request:
        kwargs = {"files": {"file": _file(file, "query")}, "data": _form_params(params)}
        return Request("POST", f"/v1/collections/{_segment(collection)}/search", kwargs)

    @staticmethod
    def search_json(collection: str, query: dict[str, Any], params: Mapping[str, Any]) -> Request:
        return Request("POST", f"/v1/collections/{_segment(collection)}/search", {"json": {**query, **params}})

    @staticmethod
    def record_judgment(collection: str, qid: str, doc: str, grade: int, query: str | None) -> Request:
        body = {"qid": qid, "doc": doc, "grade": grade, **({"query": query} if query else {})}
        return Request("POST", f"/v1/collections/{_segment(collection)}/judgments", {"json": body})

    @staticmethod
    def list_judgments(collection: str, qid: str | None) -> Request:
        params = {"qid": qid} if qid else {}
        return Request("GET", f"/v1/collections/{_segment(collection)}/judgments", {"params": params})

    @staticmethod
    def record_runs(collection: str, qid: str, runs: Mapping[str, list[tuple[str, float]]], query: str | None) -> Request:
        body: dict[str, Any] = {"qid": qid, "runs": {name: [{"id": d, "score": s} for d, s in docs] for name, docs in runs.items()}}
        if query:
            body["query"] = query
        return Request("POST", f"/v1/collections/{_segment(collection)}/judgments/runs", {"json": body})

    @staticmethod
    def judging_confidence(collection: str, k: int, systems: list[str] | None) -> Request:
        params: dict[str, Any] = {"k": k, **({"systems": ",".join(systems)} if systems else {})}
        return Request("GET", f"/v1/collections/{_segment(collection)}/judgments/confidence", {"params": params})
