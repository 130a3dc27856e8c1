"""Relevance judgments from the page, and the confidence of a comparison between configurations."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field

from app.api.deps import ServicesDep
from app.api.error_docs import BODY, V1, WRITE_503, error_responses
from app.usecases.judging import JudgmentStore

router = APIRouter(tags=["judgments"])


def get_store(services: ServicesDep) -> JudgmentStore:
    # one store per data directory; kept on the services object so it lives as long as they do
    store = getattr(services, "judgment_store", None)
    if store is None:
        store = JudgmentStore(services.data_dir / "judgments")
        setattr(services, "judgment_store", store)
    return store


StoreDep = Annotated[JudgmentStore, Depends(get_store)]


class JudgmentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qid: str = Field(description="Query id without spaces, e.g. 'item:chirp-up-1' or 'text:red%20circle'")
    doc: str = Field(description="The judged item's id")
    grade: int = Field(ge=0, le=2, description="0 not relevant, 1 partly relevant, 2 relevant")
    query: str | None = Field(None, max_length=2000, description="Human-readable description of the query")


class RankedDoc(BaseModel):
    id: str
    score: float


class RunsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    qid: str
    query: str | None = Field(None, max_length=2000)
    runs: dict[str, list[RankedDoc]] = Field(min_length=1, description="configuration name -> ranked results, best first")


@router.post("/collections/{name}/judgments", responses=error_responses(*V1, *BODY, 404, 507, e503=WRITE_503))
async def create_judgment(name: str, body: JudgmentCreate, services: ServicesDep, store: StoreDep) -> dict[str, Any]:
    """Record one judgment (the last one for a query-item pair wins)."""
    services.state(name)
    services.catalog.get_item(name, body.doc)  # 404 for an item that does not exist
    await asyncio.to_thread(store.record, name, body.qid, body.doc, body.grade, body.query)
    return {"qid": body.qid, "doc": body.doc, "grade": body.grade, "path": str(store.qrels_path(name))}


@router.get("/collections/{name}/judgments", responses=error_responses(*V1, 404))
def list_judgments(name: str, services: ServicesDep, store: StoreDep, qid: str | None = None) -> dict[str, Any]:
    """Current judgments of a collection, or of one query."""
    services.state(name)
    data = store.judgments(name, qid)
    return {"data": data, "count": len(data), "path": str(store.qrels_path(name))}


@router.post("/collections/{name}/judgments/runs", responses=error_responses(*V1, *BODY, 404, 507, e503=WRITE_503))
async def create_runs(name: str, body: RunsCreate, services: ServicesDep, store: StoreDep) -> dict[str, Any]:
    """Store each compared configuration's ranking of one query (TREC run files)."""
    services.state(name)
    rankings = {system: [(d.id, d.score) for d in docs] for system, docs in body.runs.items()}
    await asyncio.to_thread(store.record_runs, name, body.qid, rankings, body.query)
    return {"qid": body.qid, "systems": sorted(rankings), "directory": str(store.runs_dir(name))}


@router.get("/collections/{name}/judgments/confidence", responses=error_responses(*V1, 404, 422))
async def read_confidence(
    name: str,
    services: ServicesDep,
    store: StoreDep,
    k: int = Query(10, ge=1, le=1000, description="Depth of AG@k"),
    systems: str | None = Query(None, description="Comma-separated configurations to compare; default all with runs"),
) -> dict[str, Any]:
    """Minimal Test Collections confidence that the compared configurations are ordered right."""
    services.state(name)
    wanted = [s.strip() for s in systems.split(",") if s.strip()] if systems else None
    return await asyncio.to_thread(store.confidence, name, k, wanted)
