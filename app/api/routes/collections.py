"""Collections: create, list, inspect, delete; and the encoders they can use."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Response

from app.api.deps import ServicesDep
from app.api.error_docs import BODY, DESCRIPTIONS, V1, WRITE_503, error_responses
from app.api.schemas import CollectionCreate, CollectionPublic, CollectionsPublic
from app.api.strict import StrictRoute
from app.encoders.checkpoint import read_config
from app.encoders.registry import is_versioned
from app.errors import NotFound

# the training-free baselines are the project's code only, under its licence
_LICENCE = "Apache-2.0"

# bodies and query strings exactly as documented (no NaN, no repeated scalar parameter: app/api/strict.py)
router = APIRouter(tags=["collections"], route_class=StrictRoute)


@router.get("/encoders", responses=error_responses(*V1))
def list_encoders(services: ServicesDep) -> dict:
    """Every available encoder with its modality, dimension, licence, source and version; loaded ones
    also their bits and sample rate. An ONNX encoder folder that cannot be used is listed with its
    ``problem`` (a collection naming it gets that message as a 422)."""
    data = []
    for name, spec in sorted(services.encoders.specs.items()):
        if is_versioned(name):  # name@version keys serve collections built with older checkpoints
            continue
        row = {"name": name, "modality": spec.modality, "source": spec.source, "version": spec.version,
               "loaded": name in services.encoders.encoders, "licence": _licence(spec) if spec.info is None else None,
               "dim": None}
        if spec.info is not None:  # an ONNX folder: its manifest's licence and source; the folder as "folder"
            row.update(spec.info, folder=spec.source)
        if name in services.encoder_problems:  # an ONNX folder that failed its check at start
            row["problem"] = services.encoder_problems[name]
        if row["loaded"]:
            row.update(services.encoders.encoders[name].describe())
        elif spec.info is None or "description" not in spec.info:
            # what it is for, without loading it: the page shows this when creating a collection
            row["description"] = _description(spec)
        row["default"] = name in (services.settings.encoders.default_audio, services.settings.encoders.default_image)
        data.append(row)
    return {"data": data, "count": len(data)}


def _licence(spec) -> str | None:
    """A trained checkpoint's weights come under its training data's licence where its config records one;
    None: not recorded (README, "Data and licences")."""
    if spec.source == "builtin":
        return _LICENCE
    try:
        config = read_config(Path(spec.source))
    except Exception:  # noqa: BLE001 - a listing must not fail on one unreadable checkpoint
        return None
    found = config.get("licence") or (config.get("data") or {}).get("licence")
    return str(found) if found else None


def _description(spec) -> str:
    if spec.info is not None:
        return str(spec.info.get("problem", ""))
    if spec.source == "builtin":
        return getattr(spec.factory, "description", "")
    try:
        return str(read_config(Path(spec.source)).get("description", ""))
    except Exception:  # noqa: BLE001 - a listing must not fail on one unreadable checkpoint
        return ""


@router.post("/collections", status_code=201, response_model=CollectionPublic,
             responses=error_responses(*V1, *BODY, 409, 507, e409="a collection with that name already exists", e503=WRITE_503,
                                       e422=DESCRIPTIONS[422] + "; or the named encoder's ONNX folder cannot be used "
                                       "(details.problem says why: missing_file, checksum, shape, input_name, ...)"))
async def create_collection(body: CollectionCreate, services: ServicesDep) -> dict:
    """Create a collection; defaults give a usable one with the modality's default encoder."""
    collection = await services.create_collection(body.model_dump())
    return services.stats(collection.name)


@router.get("/collections", response_model=CollectionsPublic, responses=error_responses(*V1))
def list_collections(services: ServicesDep) -> dict:
    data = []
    for name in sorted(services.collections):
        try:
            data.append(services.stats(name))
        except NotFound:  # deleted (by another process too) between taking the names and reading it: not listed
            continue
    return {"data": data, "count": len(data)}


@router.get("/collections/{name}", response_model=CollectionPublic, responses=error_responses(*V1, 404))
def read_collection(name: str, services: ServicesDep) -> dict:
    return services.stats(name)


@router.delete("/collections/{name}", status_code=204, responses=error_responses(*V1, 404, 507, e503=WRITE_503))
async def delete_collection(name: str, services: ServicesDep) -> Response:
    await services.delete_collection(name)
    return Response(status_code=204)
