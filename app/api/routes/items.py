"""Items: ingest (upsert), list, read, delete, original media; and ingest jobs."""

from __future__ import annotations

import os
from typing import BinaryIO, Iterator
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.api.body_docs import INGEST_BODY, INGEST_RESPONSES, ITEM_PAGE_RESPONSES, ITEM_RESPONSES
from app.api.deps import JobsDep, ServicesDep
from app.api.error_docs import BODY, V1, WRITE_503, error_responses
from app.api.schemas import MAX_OFFSET
from app.api.strict import StrictRoute
from app.api.uploads import ingest_uploads
from app.errors import InvalidInput, NotFound
from app.usecases.ingest import ingest

# query strings exactly as documented (no repeated scalar parameter: app/api/strict.py)
router = APIRouter(tags=["items"], route_class=StrictRoute)

_MEDIA_TYPES = {
    "wav": "audio/wav", "flac": "audio/flac", "ogg": "audio/ogg", "opus": "audio/ogg", "mp3": "audio/mpeg",
    "m4a": "audio/mp4", "webm": "audio/webm", "mp4": "video/mp4", "jpg": "image/jpeg", "jpeg": "image/jpeg",
    "png": "image/png", "webp": "image/webp", "gif": "image/gif",
}


@router.post("/collections/{name}/items", openapi_extra=INGEST_BODY,
             responses={**INGEST_RESPONSES, **error_responses(*V1, *BODY, 400, 404, 409, 415, 429, 507, e503=WRITE_503)})
async def create_items(name: str, request: Request, services: ServicesDep, jobs: JobsDep, wait: bool = True) -> JSONResponse:
    """Ingest files (multipart `files` + `ids` + `metadata`, or JSON `items` with base64); upsert by id.

    Small batches answer 200 once committed; large ones, or `?wait=false`, answer 202 with a job.
    """
    state = services.state(name)
    uploads = await ingest_uploads(request, services.settings.limits.max_files)
    if not wait or len(uploads) > services.settings.limits.sync_ingest_files:
        # limits.max_pending_jobs, counted in the catalog (cluster-wide): 429 with Retry-After when full
        job = request.app.state.job_gate.submit(jobs, name, uploads)
        return JSONResponse(job, status_code=202, headers={"Location": f"/v1/jobs/{job['id']}"})
    report = await ingest(services, state, uploads)
    if not report.indexed:
        # nothing was stored: answer with the first file's error so the status code says why
        first = report.errors[0]
        error = dict(first["error"])
        error["details"] = report.errors
        return JSONResponse({"error": error}, status_code=first["status"])
    return JSONResponse({"indexed": report.indexed, "errors": report.errors, "collection": name})


@router.get("/collections/{name}/items", responses={**ITEM_PAGE_RESPONSES, **error_responses(*V1, 404, 422)})
def list_items(
    name: str,
    services: ServicesDep,
    limit: int = Query(50, ge=1, description="Page size, at most limits.max_page_size (default 1000)"),
    offset: int = Query(0, ge=0, le=MAX_OFFSET, description="Items to skip (at most 2**53 - 1)"),
) -> dict:
    services.state(name)
    if limit > services.settings.limits.max_page_size:
        raise InvalidInput(f"limit is {limit}; the largest page is {services.settings.limits.max_page_size} "
                           "items (limits.max_page_size): page with offset")
    data = [_public(i) for i in services.catalog.list_items(name, limit, offset)]
    total, _ = services.catalog.counts(name)
    return {"data": data, "count": total, "limit": limit, "offset": offset}


@router.get("/collections/{name}/items/{item_id:path}/media", response_class=StreamingResponse, responses={
    200: {"description": "The stored original, with its media type", "content": {
        t: {"schema": {"type": "string", "format": "binary"}} for t in sorted({*_MEDIA_TYPES.values(), "application/octet-stream"})}},
    **error_responses(*V1, 404)})
def read_item_media(name: str, item_id: str, services: ServicesDep) -> StreamingResponse:
    """The stored original, when the collection keeps media."""
    services.state(name)
    # The file is opened here, before the answer starts: an upsert or a delete of the item removes
    # it at any moment, and FileResponse opened it only after sending the headers (the fuzz saw the
    # connection broken mid-answer, bench/reliability/fuzz.py). An open file stays readable after its unlink;
    # a file replaced between reading the row and opening it is looked up once more.
    for attempt in range(2):
        item = services.catalog.get_item(name, item_id)
        if not item["media_path"]:
            raise NotFound(f"item {item_id!r} has no stored media (the collection was created with keep_media=false)")
        try:
            handle = open(services.media.path(item["media_path"]), "rb")  # noqa: SIM115 - closed by _chunks
            break
        except (FileNotFoundError, IsADirectoryError):
            if attempt:
                raise NotFound(f"the media file of item {item_id!r} is missing from the data directory") from None
    filename = item["filename"] or item_id
    quoted = quote(filename)
    disposition = f"attachment; filename*=utf-8''{quoted}" if quoted != filename else f'attachment; filename="{filename}"'
    headers = {"Content-Length": str(os.fstat(handle.fileno()).st_size), "Content-Disposition": disposition}
    media_type = _MEDIA_TYPES.get(item["media_type"] or "", "application/octet-stream")
    return StreamingResponse(_chunks(handle), media_type=media_type, headers=headers)


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    with handle:  # also closed when a client leaves early (the generator is closed then)
        while chunk := handle.read(64 * 1024):
            yield chunk


# ids may contain "/" (folder ingest uses relative paths), hence the path converter
@router.get("/collections/{name}/items/{item_id:path}", responses={**ITEM_RESPONSES, **error_responses(*V1, 404)})
def read_item(name: str, item_id: str, services: ServicesDep) -> dict:
    services.state(name)
    return _public(services.catalog.get_item(name, item_id))


@router.delete("/collections/{name}/items/{item_id:path}", status_code=204,
               responses=error_responses(*V1, 404, 507, e503=WRITE_503))
async def delete_item(name: str, item_id: str, services: ServicesDep) -> Response:
    await services.delete_item(name, item_id)
    return Response(status_code=204)


@router.get("/jobs/{job_id}", responses=error_responses(401, 403, 404, 429))
def read_job(job_id: str, jobs: JobsDep) -> dict:
    """Progress of an ingest job: status, done/total, per-file errors."""
    return jobs.public(job_id)


def _public(item: dict) -> dict:
    return {k: v for k, v in item.items() if k != "media_path"}

