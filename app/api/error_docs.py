"""Error responses for the OpenAPI document: one JSON error shape, one description per status code.

Every route lists the error codes it can answer with ``responses=error_responses(...)``; this table
is the one place their descriptions live. tests/reliability/test_error_codes.py provokes each listed
code on each route, and the schemathesis fuzz (tests/reliability/test_fuzz_api.py) fails on any
code a route answers without listing it.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from app.api.limit_docs import add_limit_bounds
from app.api.links import add_links
from app.settings import LimitSettings


class ErrorDetail(BaseModel):
    code: str = Field(description="Machine-readable, e.g. not_found, invalid_input, payload_too_large")
    message: str = Field(description="What went wrong and what to do, for a person")
    details: Any = Field(None, description="Per-field or per-file problems, when there are any")


class ErrorBody(BaseModel):
    """The one error shape of every route: ``{"error": {"code", "message", "details"}}``."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


EXAMPLE = {"error": {"code": "...", "message": "...", "details": {}}}

DESCRIPTIONS = {
    400: "malformed JSON, base64 or multipart body",
    401: "API keys are on and none (or a wrong one) was sent",
    403: "the API key is valid but lacks the scope this route needs (read, write or admin; see x-required-scope)",
    404: "no such collection, item or job",
    409: "conflict: the collection's encoder checkpoint version is not available (re-embed it or add the checkpoint)",
    413: "body, audio length or image size over the configured limit",
    415: "unsupported media format, or media of the wrong modality",
    422: "invalid parameter (a count or value over its configured limit included), or corrupt / too short media",
    429: "too many requests from this key or address (code rate_limited, with Retry-After), or a bounded queue "
         "is full (code overloaded: the batch queue, or the pending ingest jobs); retry later",
    500: "the demo media is missing from this installation",
    503: "the service is still starting, or (cluster mode) the PostgreSQL catalog cannot be reached (code "
         "catalog_unavailable), an index shard is missing (the message names it) or the Ray head cannot be reached "
         "(code ray_unavailable: what runs on Ray waits for it to be back), the process is opening a collection "
         "(code collection_opening) or no Ray node has room for a new collection's shard actors (code cluster_full); "
         "cluster 503s carry Retry-After",
    507: "the data directory's disk is full (code insufficient_storage): nothing of the write was stored; "
         "retry once space is freed, no restart needed",
}
# a route that writes to the data directory also answers 503 when it is read-only, and 507 when it is full
WRITE_503 = ("the service is still starting, the data directory is read-only (code storage_read_only: nothing "
             "was stored, search still works), or (cluster mode) the PostgreSQL catalog cannot be reached (code "
             "catalog_unavailable: not acknowledged, safe to re-send), an index shard is missing (the message names "
             "it) or the Ray head with the embedding workers cannot be reached (code ray_unavailable: not "
             "acknowledged, safe to re-send), the process is opening a collection (code collection_opening) or no Ray node has "
             "room for a new collection's shard actors (code cluster_full); cluster 503s carry Retry-After")

# what every /v1 route can answer whatever it does: no key (401), a key without the route's scope (403),
# over the rate limit (429) and not loaded yet (503)
V1 = (401, 403, 429, 503)
# a route that reads a body also answers 400 (unparsable), 413 (the body limit) and 422 (invalid fields)
BODY = (400, 413, 422)


def error_responses(*codes: int, **overrides: str) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its description (``overrides`` as ``e503="..."``) and the error shape."""
    return {
        code: {"description": overrides.get(f"e{code}", DESCRIPTIONS[code]), "model": ErrorBody,
               "content": {"application/json": {"example": EXAMPLE}}}
        for code in sorted(set(codes))
    }


SECURITY_SCHEMES = {
    "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    "bearer": {"type": "http", "scheme": "bearer"},
}


def finish_openapi(app: FastAPI, api_keys: bool, limits: LimitSettings | None = None) -> None:
    """The document as served: only declared 422s, (with keys on) the key schemes of every /v1 route,
    the configured ``limits`` as schema bounds (app/api/limit_docs.py) and the links between
    operations (app/api/links.py).

    FastAPI adds a 422 (with its own body schema, which this service never sends: validation
    errors answer the one error shape) to every route with a parameter, even where no value can
    fail validation (a plain string path parameter). Routes that can answer 422 declare it with
    ``error_responses``; the automatic ones are dropped, so the document claims no code a route
    cannot give.
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        # a copy: FastAPI puts the routes' openapi_extra and responses dicts (module data shared by
        # every app of the process) into the document as they are, and the bounds below differ per app
        spec = copy.deepcopy(build())
        if limits is not None:
            add_limit_bounds(spec, limits)
        add_links(spec)
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                response = operation.get("responses", {}).get("422", {})
                schema = response.get("content", {}).get("application/json", {}).get("schema", {})
                if schema.get("$ref", "").endswith("/HTTPValidationError"):
                    del operation["responses"]["422"]
        schemas = spec.get("components", {}).get("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        if api_keys:  # either scheme is enough (deps.require_api_key)
            spec.setdefault("components", {})["securitySchemes"] = SECURITY_SCHEMES
            for path, operations in spec.get("paths", {}).items():
                if path.startswith("/v1/"):
                    for operation in operations.values():
                        operation["security"] = [{"apiKey": []}, {"bearer": []}]
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
