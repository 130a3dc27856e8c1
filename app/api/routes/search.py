"""Search a collection by example file, stored item, or text."""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.datastructures import UploadFile

from app.api.body_docs import SEARCH_BODY
from app.api.deps import ServicesDep
from app.api.error_docs import error_responses
from app.api.schemas import SearchRequest, SearchResponse
from app.api.uploads import content_type, decode_base64, form_fields, parse_model, parsed_form, read_json
from app.api.strict import StrictRoute
from app.errors import BadRequest
from app.media.decode import Upload
from app.usecases.query import run_search

# query strings exactly as documented, when a route gets parameters (app/api/strict.py)
router = APIRouter(tags=["search"], route_class=StrictRoute)

_FORM_FIELDS = set(SearchRequest.model_fields) - {"content_base64"}


@router.post("/collections/{name}/search", response_model=SearchResponse, response_model_exclude_none=True,
             openapi_extra=SEARCH_BODY, responses=error_responses(400, 401, 403, 404, 409, 413, 415, 422, 429, 503))
async def search_collection(name: str, request: Request, services: ServicesDep) -> dict:
    """Multipart with a `file` part and form fields, or JSON with `item_id` / `text` / `content_base64`."""
    state = services.state(name)
    kind = content_type(request)
    upload = None
    # A multipart query carries an example to encode: tell the encoder's batcher before the body
    # is even read, so a batch forming meanwhile waits for it (bounded by max_wait_ms) instead
    # of leaving with one query. Ended before this query's own submit, or below on any error.
    announcement = services.encoders.expecting(state.collection.encoder_key) if kind == "multipart/form-data" else None
    try:
        if kind == "application/json":
            params = parse_model(SearchRequest, await read_json(request), "search request", strict=True)
            if params.content_base64 is not None:
                upload = Upload("query", decode_base64(params.content_base64, "search request"))
        elif kind == "multipart/form-data":
            async with parsed_form(request) as form:
                params = parse_model(SearchRequest, form_fields(form, _FORM_FIELDS), "search request")
                parts = [f for f in form.getlist("file") if isinstance(f, UploadFile)]
                if len(parts) > 1:
                    raise BadRequest("send one 'file' part per search")
                if parts:
                    upload = Upload(parts[0].filename or "query", await parts[0].read())
        else:
            raise BadRequest("send multipart/form-data with a 'file' part, or application/json with 'item_id' or 'text'")
        return await run_search(services, name, params, upload, announcement)
    finally:
        if announcement is not None:
            announcement.done()
