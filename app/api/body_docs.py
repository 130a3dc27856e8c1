"""Request bodies of the routes that parse their own body (multipart or JSON), for the OpenAPI document.

Ingest and search read the raw request so one route can take either multipart files or JSON with
base64; FastAPI therefore cannot infer their bodies. These ``openapi_extra`` blocks describe both
forms, so clients and the schemathesis fuzz (tests/reliability/test_fuzz_api.py) see every field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.api.schemas import ItemsIn, SearchRequest


def _inline(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema with its ``$defs`` substituted in place (the document has no such components)."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(schema)


def _ingest_body() -> dict[str, Any]:
    multipart = {
        "type": "object",
        "additionalProperties": False,  # other fields are refused (422)
        "required": ["files"],
        "properties": {
            "files": {"type": "array", "items": {"type": "string", "format": "binary"}, "minItems": 1,
                      "description": "One part per file (audio or image, by the collection's modality)"},
            "ids": {"type": "string", "description": "Comma-separated ids, one per file in order (default: the file name)"},
            "metadata": {"type": "string", "description": "JSON list of objects, one per file in order"},
        },
    }
    return {"requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": multipart},
        "application/json": {"schema": _inline(ItemsIn)},
    }}}


def _search_body() -> dict[str, Any]:
    fields = _inline(SearchRequest)
    form = {k: v for k, v in fields["properties"].items() if k != "content_base64"}
    form["filter"] = {"type": "string", "description": "JSON object: metadata equality, every key must match"}
    form["file"] = {"type": "string", "format": "binary", "description": "The example clip or image to search with"}
    multipart = {"type": "object", "additionalProperties": False, "properties": form}
    return {"requestBody": {"required": True, "content": {
        "multipart/form-data": {"schema": multipart},
        "application/json": {"schema": fields},
    }}}


INGEST_BODY = _ingest_body()
SEARCH_BODY = _search_body()

# the 200 and 202 answers of ingest, which builds its JSONResponse itself
INGEST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Committed: the indexed files, and the files refused with their own errors",
          "content": {"application/json": {"schema": {
              "type": "object", "required": ["indexed", "errors", "collection"],
              "properties": {
                  # the ids feed the document's links (app/api/links.py: $response.body#/indexed/0/id)
                  "indexed": {"type": "array", "items": {"type": "object", "required": ["id", "filename", "segments"], "properties": {
                      "id": {"type": "string"}, "filename": {"type": "string"}, "segments": {"type": "integer"}}}},
                  "errors": {"type": "array", "items": {"type": "object", "required": ["file", "status", "error"], "properties": {
                      "file": {"type": "string"}, "id": {"type": ["string", "null"]}, "status": {"type": "integer"},
                      "error": {"type": "object", "required": ["code", "message"]}}}},
                  "collection": {"type": "string"}},
          }}}},
    202: {"description": "Accepted as a job (large batch or ?wait=false): follow GET /v1/jobs/{id} (the Location header)",
          "content": {"application/json": {"schema": {
              "type": "object", "required": ["id", "status"],
              "properties": {"id": {"type": "string"}, "status": {"type": "string"}},
          }}}},
}

# An item as GET .../items/{id} and the listing answer it (the routes return the catalog's dict: a
# schema here documents it without filtering it); its id feeds the document's links.
ITEM_SCHEMA: dict[str, Any] = {
    "type": "object", "required": ["id", "has_media", "metadata", "created_at"],
    "properties": {
        "id": {"type": "string"}, "filename": {"type": ["string", "null"]}, "media_type": {"type": ["string", "null"]},
        "has_media": {"type": "boolean"}, "duration_s": {"type": ["number", "null"]}, "width": {"type": ["integer", "null"]},
        "height": {"type": ["integer", "null"]}, "metadata": {"type": "object"}, "created_at": {"type": "number"},
        "segments": {"type": "integer", "description": "Windows (audio) or 1 (image) indexed for the item"},
    },
}
ITEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "The item's record (not its media: GET .../media)", "content": {"application/json": {"schema": ITEM_SCHEMA}}}}
ITEM_PAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "A page of items, by id; `count` is the collection's total", "content": {"application/json": {"schema": {
        "type": "object", "required": ["data", "count", "limit", "offset"],
        "properties": {"data": {"type": "array", "items": ITEM_SCHEMA}, "count": {"type": "integer"},
                       "limit": {"type": "integer"}, "offset": {"type": "integer"}}}}}}}
JUDGMENT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "Recorded (durable on return)", "content": {"application/json": {"schema": {
        "type": "object", "required": ["qid", "doc", "grade", "path"],
        "properties": {"qid": {"type": "string"}, "doc": {"type": "string"}, "grade": {"type": "integer"},
                       "path": {"type": "string", "description": "The qrels file it was appended to"}}}}}}}
