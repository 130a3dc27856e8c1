"""Relevance judgments from the page, and the confidence of a comparison between configurations."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from app.api.body_docs import JUDGMENT_RESPONSES
from app.api.deps import ServicesDep
from app.api.error_docs import BODY, V1, WRITE_503, error_responses
from app.api.strict import StrictRoute
from app.usecases.judging import QID_MAX, JudgmentStore

# bodies and query strings exactly as documented (no NaN, no repeated scalar parameter: app/api/strict.py)
router = APIRouter(tags=["judgments"], route_class=StrictRoute)


def get_store(services: ServicesDep) -> JudgmentStore:
    # one store per data directory; kept on the services object so it lives as long as they do
    store = getattr(services, "judgment_store", None)
    if store is None:
        store = JudgmentStore(services.data_dir / "judgments")
        setattr(services, "judgment_store", store)
    return store


StoreDep = Annotated[JudgmentStore, Depends(get_store)]


# A query id is the first column of the qrels and run files (app/usecases/judging.py): no whitespace,
# which would split it, and no leading '#', which their readers skip as a comment line (a judgment
# acknowledged and then never read back). check_qid also refuses non-printable characters (422).
QID_PATTERN = r"^[^\s#]\S*$"
# the configuration name is a run file's name (check_system: the same rule)
SYSTEM_PATTERN = r"^[A-Za-z0-9_.-]{1,40}$"


def _qid(**extra: Any) -> Any:
    return Field(min_length=1, max_length=QID_MAX, pattern=QID_PATTERN, **extra)


class JudgmentCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented (app/api/schemas.py)

    qid: str = _qid(description="Query id without spaces, e.g. 'item:chirp-up-1' or 'text:red%20circle'")
    doc: str = Field(min_length=1, description="The judged item's id")
    grade: int = Field(ge=0, le=2, description="0 not relevant, 1 partly relevant, 2 relevant")
    query: str | None = Field(None, max_length=2000, description="Human-readable description of the query")


class RankedDoc(BaseModel):
    # no NaN or infinity: the run file's reader refuses a NaN score, so one stored broke every
    # later read of the file; strict JSON (app/api/strict.py) refuses the literals too
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    id: str = Field(min_length=1, description="An item id (any characters; whitespace is escaped in the run file)")
    score: float = Field(description="Higher is better; ties are broken by the order given")


class RunsCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    qid: str = _qid()
    query: str | None = Field(None, max_length=2000)
    runs: dict[Annotated[str, Field(pattern=SYSTEM_PATTERN)], list[RankedDoc]] = Field(
        min_length=1, description="configuration name (1-40 letters, digits, '_', '-', '.') -> ranked results, best first",
        json_schema_extra={"additionalProperties": False})  # only names matching the pattern

    @field_validator("runs")
    @classmethod
    def _one_rank_per_item(cls, runs: dict[str, list[RankedDoc]]) -> dict[str, list[RankedDoc]]:
        # a run file lists an item once per query; a repeat was written, then refused by every
        # later read of the file (500s on runs and confidence until it was removed by hand)
        for system, docs in runs.items():
            counts = Counter(d.id for d in docs)
            if len(counts) != len(docs):
                repeated = sorted(i for i, n in counts.items() if n > 1)[:5]
                raise ValueError(f"configuration {system!r} ranks {repeated} more than once; rank each item once")
        return runs


@router.post("/collections/{name}/judgments",
             responses={**JUDGMENT_RESPONSES, **error_responses(*V1, *BODY, 404, 507, e503=WRITE_503)})
async def create_judgment(name: str, body: JudgmentCreate, services: ServicesDep, store: StoreDep) -> dict[str, Any]:
    """Record one judgment (the last one for a query-item pair wins)."""
    services.state(name)
    services.catalog.get_item(name, body.doc)  # 404 for an item that does not exist
    await asyncio.to_thread(store.record, name, body.qid, body.doc, body.grade, body.query)
    return {"qid": body.qid, "doc": body.doc, "grade": body.grade, "path": str(store.qrels_path(name))}


@router.get("/collections/{name}/judgments", responses=error_responses(*V1, 404, 422, e422="qid given more than once"))
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
