"""FastAPI dependencies: the services of the running app, and the fail-closed check of /v1 routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.errors import Unhealthy
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
    """The /v1 routers' dependency: refuse a route that has no access rule (403) when keys are on.

    The key, scope and rate checks of ruled routes run earlier, as middleware (app/api/auth.py), so
    that they come before the body is parsed; create_app puts the Guard on ``app.state.guard``.
    """
    await request.app.state.guard.refuse_unruled(request)
