"""Liveness, readiness, Prometheus metrics, and the encoder list."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from app.api.strict import StrictRoute


# query strings exactly as documented, when a route gets parameters (app/api/strict.py)
router = APIRouter(tags=["health"], route_class=StrictRoute)


@router.get("/healthz")
def read_health() -> dict[str, str]:
    """The process is alive."""
    return {"status": "ok"}


_READY = {"type": "object", "required": ["status"], "properties": {
    "status": {"type": "string", "enum": ["ready", "unavailable"]},
    "collections": {"type": "integer"}, "reasons": {"type": "array", "items": {"type": "string"}}}}


@router.get("/readyz", responses={
    200: {"description": "Ready: encoders and indices are loaded", "content": {"application/json": {"schema": _READY}}},
    503: {"description": "Not ready yet; `reasons` says what is still loading", "content": {"application/json": {"schema": _READY}}},
})
def read_readiness(request: Request) -> JSONResponse:
    """200 once encoders and indices are loaded; 503 with the reasons until then."""
    services = getattr(request.state, "services", None)
    reasons = ["starting"] if services is None else list(services.not_ready)
    if services is not None and not services.loaded and not reasons:
        reasons = ["seeding demo data"]
    if reasons:
        return JSONResponse({"status": "unavailable", "reasons": reasons}, status_code=503)
    return JSONResponse({"status": "ready", "collections": len(services.collections)})


@router.get("/metrics", response_class=Response, responses={
    200: {"description": "Prometheus exposition format", "content": {"text/plain": {"schema": {"type": "string"}}}}})
def read_metrics(request: Request) -> Response:
    """Prometheus exposition format (answers while loading, too)."""
    services = request.state.services
    return Response(services.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")
