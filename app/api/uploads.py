"""Turning ingest and search request bodies (multipart or JSON) into uploads and parameters."""

from __future__ import annotations

import base64
import binascii
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import Request
from pydantic import BaseModel, ValidationError
from starlette.datastructures import UploadFile

from app.api import strict
from app.errors import BadRequest, InvalidInput
from app.media.decode import Upload


async def read_json(request: Request) -> Any:
    return strict.loads(await request.body())  # no NaN, lone surrogates, ... (app/api/strict.py)


def decode_base64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(f"{what}: content_base64 is not valid base64 ({exc})") from exc


def parse_model(model: type[BaseModel], data: Any, what: str, *, strict: bool | None = None) -> Any:
    """``data`` as ``model`` (422 with every problem); ``strict=True`` for JSON, where types are exact."""
    try:
        return model.model_validate(data, strict=strict)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors())
        raise InvalidInput(f"{what}: {problems}", details=exc.errors(include_url=False, include_context=False)) from exc


def content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def read_form(request: Request, max_files: int = 10_000) -> Any:
    try:
        return await request.form(max_files=max_files, max_fields=1000)
    except Exception as exc:  # multipart parser errors carry no useful type
        if hasattr(exc, "status_code") and getattr(exc, "status_code") == 413:
            raise
        if "Too many files" in str(exc):  # Starlette stops parsing at max_files + 1: a count, not a syntax error
            raise InvalidInput(_too_many(max_files)) from exc
        raise BadRequest(f"the multipart body could not be parsed: {exc}") from exc


@asynccontextmanager
async def parsed_form(request: Request, max_files: int = 10_000) -> AsyncIterator[Any]:
    """The multipart form, closed on leaving: its file parts are spooled temporary files (on disk
    past 1 MB each) that otherwise stay open until garbage collection, one ResourceWarning each."""
    form = await read_form(request, max_files)
    try:
        yield form
    finally:
        await form.close()


def _too_many(max_files: int) -> str:
    return f"more than {max_files} files in one request (limits.max_files); split the batch into several requests"


async def ingest_uploads(request: Request, max_files: int) -> list[Upload]:
    """Files from multipart (`files`, `ids`, `metadata`) or JSON (`items` with base64); at most ``max_files``."""
    kind = content_type(request)
    if kind == "application/json":
        from app.api.schemas import ItemsIn

        body = parse_model(ItemsIn, await read_json(request), "request body")
        if len(body.items) > max_files:
            raise InvalidInput(_too_many(max_files), details={"files": len(body.items), "max_files": max_files})
        return [
            Upload(
                filename=item.filename or item.id or f"item-{n}",
                data=decode_base64(item.content_base64, f"items[{n}]"),
                id=item.id,
                metadata=item.metadata,
            )
            for n, item in enumerate(body.items)
        ]
    if kind != "multipart/form-data":
        raise BadRequest("send multipart/form-data with 'files' parts, or application/json with an 'items' list")
    async with parsed_form(request, max_files) as form:
        files = [f for f in form.getlist("files") if isinstance(f, UploadFile)]
        if not files:
            raise InvalidInput("no 'files' parts in the multipart body")
        ids = _form_ids(form.get("ids"), len(files))
        metadata = _form_metadata(form.get("metadata"), len(files))
        uploads = []
        for n, part in enumerate(files):
            uploads.append(Upload(part.filename or f"file-{n}", await part.read(), ids[n], metadata[n]))
    return uploads


def _form_ids(raw: Any, n: int) -> list[str | None]:
    if raw is None or raw == "":
        return [None] * n
    ids = [s.strip() for s in str(raw).split(",")]
    if len(ids) != n:
        raise InvalidInput(f"'ids' has {len(ids)} entries for {n} files; give one id per file, comma-separated, in file order")
    return [i or None for i in ids]


def _form_metadata(raw: Any, n: int) -> list[dict[str, Any]]:
    if raw is None or raw == "":
        return [{} for _ in range(n)]
    value = strict.loads(str(raw), "'metadata'")
    if isinstance(value, dict) and n == 1:
        value = [value]
    if not isinstance(value, list) or len(value) != n or not all(isinstance(v, dict) for v in value):
        raise InvalidInput(f"'metadata' must be a JSON list of {n} objects, one per file in order")
    return value


def form_fields(form: Any, fields: set[str]) -> dict[str, Any]:
    """Non-file form fields as a dict; `filter` is JSON text."""
    data: dict[str, Any] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile) or key not in fields:
            continue
        if key == "filter":
            value = strict.loads(value, "'filter'") if value else {}
        data[key] = value
    unknown = {k for k, v in form.multi_items() if not isinstance(v, UploadFile)} - fields
    if unknown:
        raise InvalidInput(f"unknown form fields {sorted(unknown)}; allowed: {sorted(fields)}")
    return data
