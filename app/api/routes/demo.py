"""The demo data on request: the page's empty state offers it (``POST /v1/demo``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import ServicesDep
from app.api.error_docs import error_responses
from app.api.strict import StrictRoute

# query strings exactly as documented, when a route gets parameters (app/api/strict.py)
router = APIRouter(tags=["demo"], route_class=StrictRoute)



@router.post(
    "/demo",
    responses=error_responses(401, 403, 429, 500, 503, e503="the service is still starting"),
)
async def add_demo(services: ServicesDep) -> dict[str, Any]:
    """Create the demo collections that do not exist yet (real spoken words, sounds and photos).

    Collections that exist, demo or not, are left as they are; calling it again adds nothing.
    """
    from app.usecases.demo import add_demo_collections

    summary = await add_demo_collections(services)
    return {"added": summary["collections"], "seconds": summary["seconds"]}
