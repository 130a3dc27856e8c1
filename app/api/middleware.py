"""ASGI middleware: request-size limit (413 before parsing) and per-route latency metrics.

The key and rate check (app/api/auth.py) is middleware too, and answers through :func:`send_error`.
"""

from __future__ import annotations

import json
import time
from typing import Any, Awaitable, Callable

from app.errors import PayloadTooLarge, ServiceError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def send_error(send: Send, error: ServiceError) -> None:
    """An error answered by middleware (outside FastAPI's handlers): the one JSON shape and its headers."""
    body = json.dumps(error.to_body()).encode()
    extra = [(k.lower().encode(), v.encode()) for k, v in (getattr(error, "headers", None) or {}).items()]
    await send({"type": "http.response.start", "status": error.status_code,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]})
    await send({"type": "http.response.body", "body": body})


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class BodyLimit:
    """Refuse bodies over ``limit`` bytes: by Content-Length up front, or while streaming.

    Only requests whose method carries a body (POST, PUT, PATCH) are refused up front: no GET or
    DELETE route reads its body, so a stray one there is never loaded and those routes answer as
    documented, without a 413 the OpenAPI document does not list for them.
    """

    def __init__(self, app: Any, limit: Callable[[], int]) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("method") not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        limit = self.limit()
        error = PayloadTooLarge(f"the request body is over the {limit} byte limit; send fewer or smaller files")
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await send_error(send, error)
                return
        received = 0

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise error
            return message

        await self.app(scope, limited_receive, send)


class RouteTimer:
    """Observe request latency labelled by route template (not raw path: ids would explode labels)."""

    def __init__(self, app: Any, observe: Callable[[str, str, int, float], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_status(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            self.observe(scope.get("method", ""), route_template(scope), status, time.perf_counter() - started)


def route_template(scope: Scope) -> str:
    """'/v1/collections/{name}/search' for '/v1/collections/birds/search'.

    Routers included in routers only know their own relative path, so the template is rebuilt
    from the matched path parameters; requests that matched no route share one label.
    """
    if scope.get("route") is None:
        return "unmatched"
    path = scope["path"]
    for name, value in scope.get("path_params", {}).items():
        path = path.replace(f"/{value}", f"/{{{name}}}", 1)
    return path
