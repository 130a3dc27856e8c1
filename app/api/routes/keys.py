"""API keys over HTTP, for an admin key: list, create (the key is shown once), revoke.

The same key file as `recall keys` (app/usecases/keys.py); plain keys from RECALL_API_KEYS are
settings, not listed here and not revocable here.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api.error_docs import BODY, error_responses
from app.api.strict import StrictRoute
from app.errors import Forbidden, NotFound
from app.storage.disk_errors import FULL_ERRNOS, READ_ONLY_ERRNOS, full, read_only
from app.usecases.keys import KeyFile

# bodies and query strings exactly as documented (no NaN, no repeated scalar parameter: app/api/strict.py)
router = APIRouter(tags=["keys"], route_class=StrictRoute)

# no 503: these routes need no encoder or index, so they answer while the service is loading
KEYS = (401, 403, 429)
WRITE_503 = "the key file's filesystem is read-only (code storage_read_only): no key was changed"


class KeyCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # JSON types as documented (app/api/schemas.py)

    scopes: list[Literal["read", "write", "admin"]] = Field(min_length=1, description="read, write and/or admin")
    name: str = Field("", max_length=200, description="A label, e.g. who holds the key")


class KeyPublic(BaseModel):
    id: str
    name: str
    scopes: list[str]
    created_at: float


class KeyCreated(KeyPublic):
    key: str = Field(description="The key itself: shown in this answer only, never stored (only its SHA-256 is)")


class KeysPublic(BaseModel):
    data: list[KeyPublic]
    count: int


def _file(request: Request) -> KeyFile:
    return request.app.state.guard.keys.file


def _writing(action):
    try:
        return action()
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            raise full() from exc
        if exc.errno in READ_ONLY_ERRNOS:
            raise read_only() from exc
        raise


@router.get("/keys", response_model=KeysPublic, responses=error_responses(*KEYS))
def list_keys(request: Request) -> dict:
    """The key file's keys: ids, names, scopes (never the keys or their hashes)."""
    data = [r.public() for r in sorted(_file(request).records().values(), key=lambda r: r.created_at)]
    return {"data": data, "count": len(data)}


@router.post("/keys", status_code=201, response_model=KeyCreated,
             responses=error_responses(*KEYS, *BODY, 503, 507, e503=WRITE_503))
def create_key(body: KeyCreate, request: Request) -> dict:
    """A new key with these scopes; the answer carries the key once. It works at once (no restart).

    With keys off the first key comes from the server's shell (`recall keys create`): otherwise anyone
    who can reach an open service could mint the first admin key and lock everyone else out."""
    if not request.app.state.guard.keys.enabled:
        raise Forbidden("keys are off: create the first key on the server with `recall keys create --scopes admin`")
    key, record = _writing(lambda: _file(request).create(body.scopes, body.name))
    return {**record.public(), "key": key}


@router.delete("/keys/{key_id}", status_code=204, responses=error_responses(*KEYS, 404, 503, 507, e503=WRITE_503))
def delete_key(key_id: str, request: Request) -> Response:
    """Revoke a key by its id; requests with it answer 401 from now on."""
    if not _writing(lambda: _file(request).revoke(key_id)):
        raise NotFound(f"no key with id {key_id!r} in the key file")
    return Response(status_code=204)
