"""FastAPI dependencies: the services of the running app and API-key checking."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request

from app.errors import Unauthorized, Unhealthy
from app.usecases.jobs import JobRunner
from app.usecases.services import Services


async def get_services(request: Request) -> Services:
    # async (like the two below) although nothing is awaited: a plain def dependency costs a
    # round trip through the thread pool on every request
    services = getattr(request.state, "services", None)
    if services is None or not services.loaded:
        reasons = services.not_ready if services is not None else ["starting"]
        raise Unhealthy(f"the service is not ready yet: {'; '.join(reasons) or 'starting'}; retry shortly")
    return services


async def get_jobs(request: Request) -> JobRunner:
    return request.state.jobs


ServicesDep = Annotated[Services, Depends(get_services)]
JobsDep = Annotated[JobRunner, Depends(get_jobs)]


async def require_api_key(request: Request) -> None:
    """When keys are configured, accept `Authorization: Bearer K` or `X-API-Key: K`."""
    keys = request.state.services.settings.api_keys
    if not keys:
        return
    presented = request.headers.get("x-api-key")
    auth = request.headers.get("authorization", "")
    if presented is None and auth.lower().startswith("bearer "):
        presented = auth[7:].strip()
    if not presented:
        raise Unauthorized("this service needs an API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
    given = presented.encode()
    # compare against every key without stopping early, in constant time per key
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given, key.get_secret_value().encode())
    if not ok:
        raise Unauthorized("the API key is not valid")
