"""Typed Python clients for the Recall API over httpx: :class:`RecallClient` and :class:`AsyncRecallClient`.

Both have the same methods with the same arguments; responses are plain dicts typed with the
TypedDicts in :mod:`recall.types` (so they print, serialise and index like the JSON they
are). Errors come back as the service's own exception classes (:mod:`app.errors`), chosen by
status code, so client code handles ``NotFound`` or ``Overloaded`` the same way server code
does; a service that cannot be reached raises ``Unhealthy``.

    with RecallClient("http://localhost:8000", api_key="...") as client:
        client.create_collection("sounds", "audio")
        client.ingest("sounds", ["dog.wav", "door.flac"])
        for hit in client.search_file("sounds", "query.wav", k=5)["results"]:
            print(hit["rank"], hit["id"], hit["segments"])
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, Iterable, Unpack

import httpx

from app import errors
from recall._requests import FileInput, Request, Requests, job_report
from recall.types import (
    Collection, Confidence, EncoderInfo, IngestReport, Item, ItemIn, ItemPage, Job, Judgment, JudgmentList, Readiness,
    SearchParams, SearchResponse,
)

__all__ = ["RecallClient", "AsyncRecallClient", "raise_for_error"]

_BY_STATUS: dict[int, type[errors.ServiceError]] = {
    400: errors.BadRequest, 401: errors.Unauthorized, 403: errors.Forbidden, 404: errors.NotFound, 409: errors.Conflict,
    413: errors.PayloadTooLarge, 415: errors.UnsupportedMedia, 422: errors.InvalidInput,
    429: errors.Overloaded, 503: errors.Unhealthy, 507: errors.InsufficientStorage,
}
_JOB_POLL_S = 0.2


def raise_for_error(response: httpx.Response) -> None:
    """Raise the service error class matching a 4xx/5xx response, with the body's message and details."""
    if response.status_code < 400:
        return
    try:
        body = response.json()["error"]
        message, details = body.get("message", response.text), body.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        message, details = response.text or response.reason_phrase, None
    default = errors.BadRequest if response.status_code < 500 else errors.BackendError
    cls = _BY_STATUS.get(response.status_code, default)
    if response.status_code == 429 and _body_code(response) == "rate_limited":
        cls = errors.RateLimited  # over the key's rate (Retry-After says when), not a full queue
    raise cls(message, details=details)


def _body_code(response: httpx.Response) -> str | None:
    try:
        return response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None


def _settings(base_url: str | None, api_key: str | None) -> tuple[str, dict[str, str]]:
    base_url = base_url or os.environ.get("RECALL_URL", "http://localhost:8000")
    api_key = api_key or os.environ.get("RECALL_API_KEY")
    return base_url, ({"X-API-Key": api_key} if api_key else {})


def _unreachable(base_url: Any, exc: httpx.TransportError) -> errors.Unhealthy:
    return errors.Unhealthy(f"cannot reach the Recall service at {base_url}: {exc or type(exc).__name__}")


class RecallClient:
    """Synchronous client. ``base_url`` defaults to $RECALL_URL or http://localhost:8000, ``api_key`` to $RECALL_API_KEY."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        base_url, headers = _settings(base_url, api_key)
        self.http = httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> RecallClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _send(self, request: Request) -> Any:
        try:
            response = self.http.request(request.method, request.path, **request.kwargs)
        except httpx.TransportError as exc:
            raise _unreachable(self.http.base_url, exc) from exc
        if request.raise_errors:
            raise_for_error(response)
        return request.parse(response)

    # --- health ---------------------------------------------------------------------------

    def health(self) -> dict[str, str]:
        return self._send(Requests.health())

    def readiness(self) -> Readiness:
        return self._send(Requests.readiness())

    def ready(self) -> bool:
        return self.readiness()["status"] == "ready"

    def metrics(self) -> str:
        return self._send(Requests.metrics())

    def list_encoders(self) -> list[EncoderInfo]:
        return self._send(Requests.list_encoders())

    # --- collections ----------------------------------------------------------------------

    def create_collection(self, name: str, modality: str, **options: Any) -> Collection:
        return self._send(Requests.create_collection(name, modality, options))

    def list_collections(self) -> list[Collection]:
        return self._send(Requests.list_collections())

    def get_collection(self, name: str) -> Collection:
        return self._send(Requests.get_collection(name))

    def delete_collection(self, name: str) -> None:
        self._send(Requests.delete_collection(name))

    # --- items ----------------------------------------------------------------------------

    def ingest(self, collection: str, files: Iterable[FileInput], ids: list[str] | None = None, metadata: list[dict[str, Any]] | None = None) -> IngestReport:
        """Upload files (paths, bytes or ``(filename, bytes)``) and wait until they are indexed.

        A batch the service turns into a background job (202) is followed until it finishes.
        Raises the error of the first file when none could be indexed.
        """
        response = self._send(Requests.ingest(collection, files, ids, metadata, wait=True))
        return self._finish_ingest(response)

    def ingest_base64(self, collection: str, items: list[ItemIn]) -> IngestReport:
        """Upload items as JSON (``{"id", "content_base64", "metadata"}``) and wait until indexed."""
        return self._finish_ingest(self._send(Requests.ingest_base64(collection, items)))

    def submit_ingest(self, collection: str, files: Iterable[FileInput], ids: list[str] | None = None, metadata: list[dict[str, Any]] | None = None) -> Job:
        """Upload files as a background job (``?wait=false``); follow it with :meth:`get_job` or :meth:`wait_for_job`."""
        return self._send(Requests.ingest(collection, files, ids, metadata, wait=False))

    def get_job(self, job_id: str) -> Job:
        return self._send(Requests.get_job(job_id))

    def wait_for_job(self, job_id: str, timeout: float = 600.0) -> Job:
        deadline = time.monotonic() + timeout
        while True:
            job = self.get_job(job_id)
            if job["status"] in ("completed", "failed"):
                return job
            if time.monotonic() > deadline:
                raise errors.Unhealthy(f"job {job_id} did not finish within {timeout} s (status {job['status']!r})")
            time.sleep(_JOB_POLL_S)

    def _finish_ingest(self, response: dict[str, Any]) -> IngestReport:
        if "indexed" in response and isinstance(response["indexed"], list):
            return response  # type: ignore[return-value]
        return job_report(self.wait_for_job(response["id"]))

    def get_item(self, collection: str, item_id: str) -> Item:
        return self._send(Requests.get_item(collection, item_id))

    def list_items(self, collection: str, limit: int = 50, offset: int = 0) -> ItemPage:
        return self._send(Requests.list_items(collection, limit, offset))

    def delete_item(self, collection: str, item_id: str) -> None:
        self._send(Requests.delete_item(collection, item_id))

    def get_media(self, collection: str, item_id: str) -> bytes:
        """The stored original file of an item."""
        return self._send(Requests.get_media(collection, item_id))

    # --- search ---------------------------------------------------------------------------

    def search_file(self, collection: str, file: FileInput, **params: Unpack[SearchParams]) -> SearchResponse:
        """Search by an example file (path, bytes or ``(filename, bytes)``)."""
        return self._send(Requests.search_file(collection, file, params))

    def search_item(self, collection: str, item_id: str, **params: Unpack[SearchParams]) -> SearchResponse:
        """Search with a stored item as the query; the item itself is not returned."""
        return self._send(Requests.search_json(collection, {"item_id": item_id}, params))

    def search_text(self, collection: str, text: str, **params: Unpack[SearchParams]) -> SearchResponse:
        """Search an image collection with a sentence (needs an image-text encoder)."""
        return self._send(Requests.search_json(collection, {"text": text}, params))

    # --- judgments ------------------------------------------------------------------------

    def record_judgment(self, collection: str, qid: str, doc: str, grade: int, query: str | None = None) -> Judgment:
        """Judge one result: grade 0 not relevant, 1 partly, 2 relevant."""
        return self._send(Requests.record_judgment(collection, qid, doc, grade, query))

    def list_judgments(self, collection: str, qid: str | None = None) -> JudgmentList:
        return self._send(Requests.list_judgments(collection, qid))

    def record_runs(self, collection: str, qid: str, runs: dict[str, list[tuple[str, float]]], query: str | None = None) -> dict[str, Any]:
        """Store each compared configuration's ranking of one query: ``{"binary": [(id, score), ...], ...}``."""
        return self._send(Requests.record_runs(collection, qid, runs, query))

    def judging_confidence(self, collection: str, k: int = 10, systems: list[str] | None = None) -> Confidence:
        """MTC confidence that the compared configurations are ordered right, from the judgments so far."""
        return self._send(Requests.judging_confidence(collection, k, systems))


class AsyncRecallClient:
    """Asynchronous client with the same methods as :class:`RecallClient`, each a coroutine."""

    def __init__(
        self, base_url: str | None = None, api_key: str | None = None, timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        base_url, headers = _settings(base_url, api_key)
        self.http = httpx.AsyncClient(base_url=base_url, headers=headers, timeout=timeout, transport=transport)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def __aenter__(self) -> AsyncRecallClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()

    async def _send(self, request: Request) -> Any:
        try:
            response = await self.http.request(request.method, request.path, **request.kwargs)
        except httpx.TransportError as exc:
            raise _unreachable(self.http.base_url, exc) from exc
        if request.raise_errors:
            raise_for_error(response)
        return request.parse(response)

    async def health(self) -> dict[str, str]:
        return await self._send(Requests.health())

    async def readiness(self) -> Readiness:
        return await self._send(Requests.readiness())

    async def ready(self) -> bool:
        return (await self.readiness())["status"] == "ready"

    async def metrics(self) -> str:
        return await self._send(Requests.metrics())

    async def list_encoders(self) -> list[EncoderInfo]:
        return await self._send(Requests.list_encoders())

    async def create_collection(self, name: str, modality: str, **options: Any) -> Collection:
        return await self._send(Requests.create_collection(name, modality, options))

    async def list_collections(self) -> list[Collection]:
        return await self._send(Requests.list_collections())

    async def get_collection(self, name: str) -> Collection:
        return await self._send(Requests.get_collection(name))

    async def delete_collection(self, name: str) -> None:
        await self._send(Requests.delete_collection(name))

    async def ingest(self, collection: str, files: Iterable[FileInput], ids: list[str] | None = None, metadata: list[dict[str, Any]] | None = None) -> IngestReport:
        return await self._finish_ingest(await self._send(Requests.ingest(collection, files, ids, metadata, wait=True)))

    async def ingest_base64(self, collection: str, items: list[ItemIn]) -> IngestReport:
        return await self._finish_ingest(await self._send(Requests.ingest_base64(collection, items)))

    async def submit_ingest(self, collection: str, files: Iterable[FileInput], ids: list[str] | None = None, metadata: list[dict[str, Any]] | None = None) -> Job:
        return await self._send(Requests.ingest(collection, files, ids, metadata, wait=False))

    async def get_job(self, job_id: str) -> Job:
        return await self._send(Requests.get_job(job_id))

    async def wait_for_job(self, job_id: str, timeout: float = 600.0) -> Job:
        deadline = time.monotonic() + timeout
        while True:
            job = await self.get_job(job_id)
            if job["status"] in ("completed", "failed"):
                return job
            if time.monotonic() > deadline:
                raise errors.Unhealthy(f"job {job_id} did not finish within {timeout} s (status {job['status']!r})")
            await asyncio.sleep(_JOB_POLL_S)

    async def _finish_ingest(self, response: dict[str, Any]) -> IngestReport:
        if "indexed" in response and isinstance(response["indexed"], list):
            return response  # type: ignore[return-value]
        return job_report(await self.wait_for_job(response["id"]))

    async def get_item(self, collection: str, item_id: str) -> Item:
        return await self._send(Requests.get_item(collection, item_id))

    async def list_items(self, collection: str, limit: int = 50, offset: int = 0) -> ItemPage:
        return await self._send(Requests.list_items(collection, limit, offset))

    async def delete_item(self, collection: str, item_id: str) -> None:
        await self._send(Requests.delete_item(collection, item_id))

    async def get_media(self, collection: str, item_id: str) -> bytes:
        return await self._send(Requests.get_media(collection, item_id))

    async def search_file(self, collection: str, file: FileInput, **params: Unpack[SearchParams]) -> SearchResponse:
        return await self._send(Requests.search_file(collection, file, params))

    async def search_item(self, collection: str, item_id: str, **params: Unpack[SearchParams]) -> SearchResponse:
        return await self._send(Requests.search_json(collection, {"item_id": item_id}, params))

    async def search_text(self, collection: str, text: str, **params: Unpack[SearchParams]) -> SearchResponse:
        return await self._send(Requests.search_json(collection, {"text": text}, params))

    async def record_judgment(self, collection: str, qid: str, doc: str, grade: int, query: str | None = None) -> Judgment:
        return await self._send(Requests.record_judgment(collection, qid, doc, grade, query))

    async def list_judgments(self, collection: str, qid: str | None = None) -> JudgmentList:
        return await self._send(Requests.list_judgments(collection, qid))

    async def record_runs(self, collection: str, qid: str, runs: dict[str, list[tuple[str, float]]], query: str | None = None) -> dict[str, Any]:
        return await self._send(Requests.record_runs(collection, qid, runs, query))

    async def judging_confidence(self, collection: str, k: int = 10, systems: list[str] | None = None) -> Confidence:
        return await self._send(Requests.judging_confidence(collection, k, systems))
