"""The configured limits, written into the served OpenAPI document as schema bounds.

Some bounds of a request are settings (``limits.*``), so the models in app/api/schemas.py cannot
carry them; the routes and use cases check them (422). Without them in the document a client (or
the schemathesis fuzz, which generates within the documented bounds) could not know that
``k=1001`` is refused while ``k=1000`` is not. Each entry below names where the value is checked.
"""

from __future__ import annotations

from typing import Any, Callable

from app.settings import LimitSettings

SEARCH = "/v1/collections/{name}/search"
ITEMS = "/v1/collections/{name}/items"


def _bounds(limits: LimitSettings) -> list[tuple[str, str, Callable[[dict[str, Any]], list[dict[str, Any]]], dict[str, int]]]:
    """(path, method, the schemas a bound applies to, the bound) for every limit a request can exceed."""

    def body_property(name: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
        def find(operation: dict[str, Any]) -> list[dict[str, Any]]:
            contents = operation.get("requestBody", {}).get("content", {}).values()
            return [c["schema"]["properties"][name] for c in contents if name in c["schema"].get("properties", {})]
        return find

    def query(name: str) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
        def find(operation: dict[str, Any]) -> list[dict[str, Any]]:
            return [p["schema"] for p in operation.get("parameters", []) if p["in"] == "query" and p["name"] == name]
        return find

    def ingest_items(operation: dict[str, Any]) -> list[dict[str, Any]]:
        content = operation["requestBody"]["content"]
        return [content["application/json"]["schema"]["properties"]["items"],
                content["multipart/form-data"]["schema"]["properties"]["files"]]

    def text(schema_list: Callable[[dict[str, Any]], list[dict[str, Any]]]) -> Callable[[dict[str, Any]], list[dict[str, Any]]]:
        # `text` is nullable in JSON (anyOf string / null): the bound goes on the string branch
        def find(operation: dict[str, Any]) -> list[dict[str, Any]]:
            found = []
            for schema in schema_list(operation):
                found.extend(s for s in schema.get("anyOf", [schema]) if s.get("type") == "string")
            return found
        return find

    return [
        (SEARCH, "post", body_property("k"), {"maximum": limits.max_k}),  # app/usecases/query.py
        (SEARCH, "post", text(body_property("text")), {"maxLength": limits.max_text_chars}),  # app/usecases/query.py
        (ITEMS, "get", query("limit"), {"maximum": limits.max_page_size}),  # app/api/routes/items.py
        (ITEMS, "post", ingest_items, {"maxItems": limits.max_files}),  # app/api/uploads.py
    ]


def add_limit_bounds(spec: dict[str, Any], limits: LimitSettings) -> None:
    """Write ``limits``' bounds into ``spec`` (a copy: the body blocks of body_docs are shared module data)."""
    for path, method, find, bound in _bounds(limits):
        targets = find(spec["paths"][path][method])
        if not targets:  # a renamed field must not silently drop its documented bound
            raise RuntimeError(f"limit_docs: no schema for {bound} in {method.upper()} {path}")
        for schema in targets:
            schema.update(bound)
