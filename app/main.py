"""create_app(settings) and the lifespan that builds and tears down the services."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import APIRouter, Depends, FastAPI

from app.api.auth import Guard, GuardMiddleware, add_scope_docs
from app.api.deps import require_api_key
from app.api.error_docs import finish_openapi
from app.api.error_handlers import install_error_handlers
from app.api.job_gate import JobGate
from app.api.middleware import BodyLimit, RouteTimer
from app.api.rate_limit import build_limiter
from app.api.routes import collections, health, items, keys as key_routes, search
from app.metrics import gauge
from app.settings import Settings
from app.usecases.jobs import JobRunner
from app.usecases.keys import KeyFile, KeyRing
from app.usecases.services import Services

log = logging.getLogger("recall")


def _scrape_gauges(services: Services) -> Any:
    def collect() -> Any:
        sizes = {name: services.catalog.counts(name) for name in services.collections}
        yield gauge("recall_collection_items", "Items per collection", "collection", {n: s[0] for n, s in sizes.items()})
        yield gauge("recall_collection_segments", "Segments per collection", "collection", {n: s[1] for n, s in sizes.items()})
        yield gauge("recall_queue_depth", "Inputs waiting per batcher", "batcher", services.encoders.queue_depths())
        # the image-text encoder keeps recent query embeddings (a repeated or re-ranked query skips MiniLM): its hit rate
        cached = {name: e for name, e in services.encoders.encoders.items() if hasattr(e, "text_cache_hits")}
        yield gauge("recall_text_cache_hits", "Text queries answered from the encoder's embedding cache", "encoder",
                    {name: e.text_cache_hits for name, e in cached.items()})
        yield gauge("recall_text_cache_misses", "Text queries embedded by the text tower", "encoder",
                    {name: e.text_cache_misses for name, e in cached.items()})

    return collect


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the FastAPI app; heavy objects are created in the lifespan, not here."""
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        log.info("settings: %s", settings.model_dump(mode="json"))  # SecretStr fields print as '**********'
        services = Services(settings)
        services.metrics.add_gauges(_scrape_gauges(services))
        app.state.timer_target = services.metrics
        jobs = JobRunner(services)
        async def start() -> None:
            await services.start()
            await jobs.start()
            if settings.demo:
                from app.usecases.demo import seed_demo

                await seed_demo(services)
            services.loaded = True

        loading = None
        # cluster mode: /readyz answers 503 while the Ray head cannot be reached (app/cluster/head_watch.py)
        watch = _watch_ray_head(services) if settings.ray_address else None
        try:
            if settings.background_start:
                loading = asyncio.get_running_loop().create_task(start())
                loading.add_done_callback(_report_failure(services))
            else:
                await start()
            yield {"services": services, "jobs": jobs}
        finally:
            if loading is not None and not loading.done():
                loading.cancel()
            if watch is not None:
                watch.cancel()
            await jobs.stop()
            await services.stop()
            getattr(app.state.guard.limiter, "close", lambda: None)()  # the shared counters' connection

    app = FastAPI(
        title="Recall",
        version="0.1.0",
        description="Query-by-example audio and text-to-image retrieval over FAISS binary and float indices.",
        lifespan=lifespan,
        generate_unique_id_function=lambda route: f"{route.tags[0]}-{route.name}" if route.tags else route.name,
    )

    install_error_handlers(app)  # domain errors -> the one JSON error shape (app/api/error_handlers.py)

    keys = KeyRing(KeyFile(settings.resolved_keys_file()), [k.get_secret_value() for k in settings.api_keys])
    # who may call what (scopes), and how often (token buckets): the /v1 routers' dependency uses it
    # in cluster mode the buckets live in the shared catalog, so the rate holds for the whole cluster
    app.state.guard = Guard(keys, build_limiter(settings.limits.rate_per_s, settings.limits.rate_burst, settings.catalog_url))
    app.state.job_gate = JobGate(settings.limits.max_pending_jobs)
    # Routes are matched in the order they are included, so the hottest route (search) comes first:
    # FastAPI walked ~28 route patterns before reaching it, a third of a search request's framework
    # Python (function calls per request 1,893 -> 1,273, bench/results/query_path.md).
    v1 = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])
    v1.include_router(search.router)
    v1.include_router(collections.router)
    v1.include_router(items.router)
    v1.include_router(key_routes.router)
    app.include_router(v1)
    app.include_router(health.router)
    _mount_web(app)
    # declared errors, key schemes, the configured limits as bounds, links (app/api/error_docs.py)
    finish_openapi(app, api_keys=keys.enabled, limits=settings.limits)
    add_scope_docs(app)  # each /v1 operation names the scope its key needs (app/api/auth.py)

    def observe(method: str, route: str, status: int, seconds: float) -> None:
        target = getattr(app.state, "timer_target", None)
        if target is not None:
            target.latency.labels(method, route, str(status)).observe(seconds)

    app.add_middleware(GuardMiddleware, guard=app.state.guard)  # keys, scopes, rate: before any body is read
    app.add_middleware(RouteTimer, observe=observe)
    app.add_middleware(BodyLimit, limit=lambda: settings.limits.max_upload_bytes)
    return app


def _report_failure(services: Services) -> Any:
    def done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("startup failed", exc_info=task.exception())
            services.not_ready = [f"startup failed: {task.exception()}"]

    return done


def _watch_ray_head(services: Services) -> asyncio.Task:
    from app.cluster.head_watch import watch_head

    return asyncio.get_running_loop().create_task(watch_head(services))


def _mount_web(app: FastAPI) -> None:
    try:
        from app.web import mount  # the browser page, when present
    except ImportError:
        return
    mount(app)
