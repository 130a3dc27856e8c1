"""The browser page: served at ``/`` with its static files under ``/static``.

``create_app`` calls :func:`mount` when this package is present. The page is plain HTML, CSS
and ES modules (no build step); it talks to the same /v1 API as every other client, sending
the API key the user typed (kept in sessionStorage, for the tab) on every request.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Depends, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from app.api.deps import require_api_key

STATIC = Path(__file__).resolve().parent / "static"


def mount(app: FastAPI) -> None:
    """Serve the page at ``/``, its files at ``/static``, and the judgments and demo APIs under ``/v1``."""
    from app.api.routes import demo, judgments

    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])
    v1.include_router(judgments.router)
    v1.include_router(demo.router)  # the page's empty state offers the demo data
    app.include_router(v1)

    @app.get("/", include_in_schema=False)
    def read_page() -> FileResponse:
        # no-cache: the page is tiny, and a stale copy after an upgrade would call old routes
        return FileResponse(STATIC / "index.html", media_type="text/html", headers={"Cache-Control": "no-cache"})

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
