"""The HTTP mapping of errors: every failure leaves as the one JSON error shape with its status.

Domain code raises ``app.errors.ServiceError`` subclasses and knows nothing of HTTP; this module is the
one place that turns them (and FastAPI's validation, Starlette's routing errors and anything
unexpected) into responses. ``tests/web/test_errors.py`` reads the codes written here.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.errors import ServiceError

log = logging.getLogger("recall")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def service_error(_: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(_safe_body(exc.to_body()), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        body = {"error": {"code": "invalid_input", "message": problems, "details": exc.errors()}}
        return JSONResponse(_safe_body(body), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # RFC 9110: Allow lists every method of the path, not the first route's
            headers["Allow"] = ", ".join(_allowed_methods(app, request))
        return JSONResponse({"error": {"code": code, "message": str(exc.detail)}}, status_code=exc.status_code,
                            headers=headers)

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)  # the trace goes to the log, never to the client
        return JSONResponse({"error": {"code": "internal_error", "message": "internal error; see the service log"}}, status_code=500)


def _allowed_methods(app: FastAPI, request: Request) -> list[str]:
    # GET and POST /v1/collections are two routes; Starlette's own 405 names only the first one's.
    # Ask the router which methods fully match this path (included routers answer for their routes).
    allowed = []
    for method in ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"):
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in app.router.routes):
            allowed.append(method)
    return allowed


def _safe_body(body: dict[str, Any]) -> dict[str, Any]:
    """An error body that JSON can always carry, whatever input it echoes.

    Validation details repeat the offending input and carry exception objects (``ctx.error``); an
    error about a NaN, a 1e400 or a lone surrogate once failed to serialise and became a 500
    instead of the 4xx it was. Strict JSON parsing (app/api/strict.py) keeps most such values
    out; this is the net for the rest (form fields, query strings).
    """
    try:
        return _jsonable(body)
    except RecursionError:  # the echoed input nests deeper than a recursive walk can go
        error = dict(body["error"])
        error["details"] = None
        return {"error": _jsonable(error)}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # JSON has no NaN or Infinity
    if isinstance(value, str):
        # a lone surrogate cannot be encoded as UTF-8: escape it (\ud800) rather than fail
        return value if value.isascii() else value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {str(_jsonable(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return _jsonable(str(value))  # exception objects (ctx.error), bytes, ...
