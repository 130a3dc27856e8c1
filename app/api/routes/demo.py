"""The demo data on request: the page's empty state offers it (``POST /v1/demo``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from app.api.deps import ServicesDep

router = APIRouter(tags=["demo"])

_ERROR = {"content": {"application/json": {"example": {"error": {"code": "...", "message": "..."}}}}}


@router.post(
    "/demo",
    responses={
        401: {"description": "API keys are on and none (or a wrong one) was sent", **_ERROR},
        500: {"description": "the demo media is missing from this installation", **_ERROR},
        503: {"description": "the service is still starting", **_ERROR},
    },
)
async def add_demo(services: ServicesDep) -> dict[str, Any]:
    """Create the demo collections that do not exist yet (real spoken words, sounds and photos).

    Collections that exist, demo or not, are left as they are; calling it again adds nothing.
    """
    from app.demo import add_demo_collections

    summary = await add_demo_collections(services)
    return {"added": summary["collections"], "seconds": summary["seconds"]}
