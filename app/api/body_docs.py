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
              "properties": {"indexed": {"type": "array"}, "errors": {"type": "array"}, "collection": {"type": "string"}},
          }}}},
    202: {"description": "Accepted as a job (large batch or ?wait=false): follow GET /v1/jobs/{id} (the Location header)",
          "content": {"application/json": {"schema": {
              "type": "object", "required": ["id", "status"],
              "properties": {"id": {"type": "string"}, "status": {"type": "string"}},
          }}}},
}
