"""Who may call which route: the route -> scope table, the key check (401/403) and the rate limit (429).

Every route of the service has a rule in ``ROUTE_SCOPES``: ``public`` (no key needed) or the scope a
key must hold (app/usecases/keys.py). tests/api/test_scoped_keys.py walks every operation of the
OpenAPI document and fails on one without a rule, so a new route cannot ship unguarded; at run
time a /v1 route with no rule is refused (403) rather than let through.

Paths are written as the routes declare them (``{item_id:path}`` matches ids with slashes), and a
request is matched against them with Starlette's own path compiler, so the rule is found from the
request alone. Where two rules match one request (an item id ending in ``/media``) the key needs
both scopes.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import Request
from starlette.datastructures import Headers
from starlette.routing import compile_path, get_route_path

from app.api.middleware import send_error
from app.api.rate_limit import RateLimiter, SharedRateLimiter, retry_after_header
from app.errors import Forbidden, RateLimited, ServiceError, Unauthorized
from app.usecases.keys import KeyRecord, KeyRing

PUBLIC = "public"
_COLLECTION = "/v1/collections/{name}"
_ITEM = _COLLECTION + "/items/{item_id:path}"

ROUTE_SCOPES: dict[tuple[str, str], str] = {
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("GET", "/metrics"): PUBLIC,
    ("GET", "/v1/encoders"): "read",
    ("GET", "/v1/collections"): "read",
    ("POST", "/v1/collections"): "admin",
    ("GET", _COLLECTION): "read",
    ("DELETE", _COLLECTION): "admin",
    ("POST", _COLLECTION + "/items"): "write",
    ("GET", _COLLECTION + "/items"): "read",
    ("GET", _ITEM + "/media"): "read",
    ("GET", _ITEM): "read",
    ("DELETE", _ITEM): "write",
    ("GET", "/v1/jobs/{job_id}"): "read",
    ("POST", _COLLECTION + "/search"): "read",
    ("POST", _COLLECTION + "/judgments"): "write",
    ("GET", _COLLECTION + "/judgments"): "read",
    ("POST", _COLLECTION + "/judgments/runs"): "write",
    ("GET", _COLLECTION + "/judgments/confidence"): "read",
    ("POST", "/v1/demo"): "write",  # adds the demo collections: the page offers it to a read+write key
    ("GET", "/v1/keys"): "admin",
    ("POST", "/v1/keys"): "admin",
    ("DELETE", "/v1/keys/{key_id}"): "admin",
}

_COMPILED = [(method, compile_path(path)[0], scope) for (method, path), scope in ROUTE_SCOPES.items()]


def openapi_path(path: str) -> str:
    """'/v1/x/{item_id:path}' -> '/v1/x/{item_id}', the form the OpenAPI document uses."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def required_scopes(method: str, path: str) -> set[str]:
    """The scopes a key needs for this request; empty when no rule matches (the caller refuses it)."""
    return {scope for m, regex, scope in _COMPILED if m == method and regex.match(path)}


def presented_key(headers: Headers) -> str | None:
    """The key a request sends, in ``X-API-Key`` or as ``Authorization: Bearer``; 401 when it sends two different ones.

    Two different keys are ambiguous: answering with either would let a bad credential ride along a good
    one unnoticed (the cluster fuzz sent a made-up bearer token beside the valid X-API-Key and got 200).
    An Authorization header of another scheme (Basic, say, from a proxy) is not a key and is left alone.
    """
    presented = headers.get("x-api-key")
    auth = headers.get("authorization", "")
    bearer = auth[7:].strip() if auth.lower().startswith("bearer ") else None
    if presented is not None and bearer is not None and bearer != presented.strip():
        raise Unauthorized("the request sends two different API keys (X-API-Key and Authorization: Bearer); send one")
    if presented is None:
        presented = bearer
    return presented or None


class Guard:
    """A valid key with the route's scope (401/403), then a token from the client's bucket (429).

    It runs as ASGI middleware (:class:`GuardMiddleware`) for every request a rule matches, before
    the route reads its body: a request without a key is refused with 401 whatever its body holds
    (FastAPI parses a declared JSON body before it runs any dependency, so a dependency would
    answer 422 to an unauthenticated client's broken JSON). The /v1 routers' dependency
    (:meth:`refuse_unruled`) catches what no rule matched: a /v1 route added without a rule.
    """

    def __init__(self, keys: KeyRing, limiter: RateLimiter | SharedRateLimiter) -> None:
        self.keys = keys
        self.limiter = limiter

    async def check(self, method: str, path: str, headers: Headers, address: str) -> None:
        needed = required_scopes(method, path) - {PUBLIC}
        if not needed:
            return
        client = self.authorize(needed, headers, address)
        # in cluster mode one round trip to the catalog's shared bucket (app/api/rate_limit.py)
        wait = await self.limiter.take_async(client)
        if wait > 0:
            raise RateLimited(
                f"too many requests from this {'key' if client.startswith('key:') else 'address'}: "
                f"over {self.limiter.rate:g} requests per second (burst {self.limiter.burst}); "
                f"retry in {wait:.2f} s", retry_after=retry_after_header(wait), details={"retry_after_s": round(wait, 3)})

    def authorize(self, needed: set[str], headers: Headers, address: str) -> str:
        """The rate-limit client of an allowed request ('key:<id>' or 'addr:<ip>'); 401/403 otherwise."""
        if not self.keys.enabled:
            return f"addr:{address}"
        record = self._record(headers)
        missing = needed - record.scopes
        if missing:
            raise Forbidden(f"this key (id {record.id}) lacks the {', '.join(sorted(missing))} scope this route needs; "
                            f"it holds {', '.join(sorted(record.scopes))}",
                            details={"needed": sorted(needed), "held": sorted(record.scopes)})
        return f"key:{record.id}"

    def _record(self, headers: Headers) -> KeyRecord:
        presented = presented_key(headers)
        if presented is None:
            raise Unauthorized("this service needs an API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
        record = self.keys.check(presented)
        if record is None:
            raise Unauthorized("the API key is not valid")
        return record

    async def refuse_unruled(self, request: Request) -> None:
        """The /v1 routers' dependency: fail closed on a route no rule covers (the middleware let it through)."""
        if self.keys.enabled and not required_scopes(request.method, get_route_path(request.scope)):
            self._record(request.headers)  # 401 first, as for any route
            raise Forbidden(f"{request.method} {request.url.path} has no access rule; refused until it has one")


class GuardMiddleware:
    """Applies :meth:`Guard.check` to each HTTP request before routing; errors in the one JSON shape."""

    def __init__(self, app: Any, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        # the path as the router matches it (without a proxy's root_path)
        path = get_route_path(scope) if scope["type"] == "http" else ""
        if path.startswith("/v1/"):
            client = scope.get("client")
            try:
                await self.guard.check(scope["method"], path, Headers(scope=scope), client[0] if client else "unknown")
            except ServiceError as error:
                await send_error(send, error)
                return
        await self.app(scope, receive, send)


def add_scope_docs(app: Any) -> None:
    """Each /v1 operation of the OpenAPI document says which scope it needs (``x-required-scope``)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        spec = build()
        for (method, path), scope in ROUTE_SCOPES.items():
            operation = spec.get("paths", {}).get(openapi_path(path), {}).get(method.lower())
            if operation is not None and scope != PUBLIC and "x-required-scope" not in operation:
                operation["x-required-scope"] = scope
                operation["description"] = (operation.get("description", "") + f"\n\nNeeds a key with the `{scope}` scope "
                                            "when keys are on.").strip()
        return spec

    app.openapi = openapi
