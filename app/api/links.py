"""OpenAPI links: which answer feeds which request, so clients (and fuzzers) can chain the API.

A link says "from this response, take this value as that operation's parameter". With them the
schemathesis stateful phase (tests/reliability/test_fuzz_api.py) drives real sequences such as
create collection -> ingest -> read item -> search by it -> delete it -> read it again (404), instead
of guessing collection names and answering 404 (most of ingest, search and items went untested so).
Operation ids are ``<tag>-<function name>`` (create_app's generate_unique_id_function).
"""

from __future__ import annotations

from typing import Any

NAME = "$request.path.name"  # the collection the source request named


def _link(operation_id: str, description: str, parameters: dict[str, str] | None = None,
          body: dict[str, Any] | None = None) -> dict[str, Any]:
    link: dict[str, Any] = {"operationId": operation_id, "description": description}
    if parameters:
        link["parameters"] = parameters
    if body is not None:
        link["requestBody"] = body
    return link


def _collection_links(name: str) -> dict[str, dict[str, Any]]:
    """What can be done with a collection whose name is ``name`` (an expression)."""
    by_name = {"name": name}
    return {
        "ReadCollection": _link("collections-read_collection", "The collection's stats", by_name),
        "IngestItems": _link("items-create_items", "Add files to the collection", by_name),
        "ListItems": _link("items-list_items", "Page through its items", by_name),
        "ListJudgments": _link("judgments-list_judgments", "Its relevance judgments", by_name),
        "ReadConfidence": _link("judgments-read_confidence", "Confidence of the stored comparison", by_name),
        "DeleteCollection": _link("collections-delete_collection", "Delete it with its items", by_name),
    }


def _item_links(item_id: str) -> dict[str, dict[str, Any]]:
    """What can be done with item ``item_id`` (an expression) of the source request's collection."""
    item = {"name": NAME, "item_id": item_id}
    return {
        "ReadItem": _link("items-read_item", "The item's record", item),
        "ReadItemMedia": _link("items-read_item_media", "The item's stored original", item),
        "SearchByItem": _link("search-search_collection", "Items like this one", {"name": NAME}, {"item_id": item_id}),
        "JudgeItem": _link("judgments-create_judgment", "Judge the item for a query", {"name": NAME}, {"doc": item_id}),
        "DeleteItem": _link("items-delete_item", "Delete the item", item),
    }


# (path, method, status) -> links of that response
LINKS: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = {
    ("/v1/collections", "post", "201"): _collection_links("$response.body#/name"),
    ("/v1/collections", "get", "200"): _collection_links("$response.body#/data/0/name"),
    ("/v1/collections/{name}", "get", "200"): _collection_links("$response.body#/name"),
    # after a delete the collection must be gone (404), not half there
    ("/v1/collections/{name}", "delete", "204"): {
        "ReadDeletedCollection": _link("collections-read_collection", "404 from now on", {"name": NAME}),
        "RecreateCollection": _link("collections-create_collection", "The name is free again", body={"name": NAME}),
    },
    ("/v1/collections/{name}/items", "post", "200"): {
        **_item_links("$response.body#/indexed/0/id"),
        "ListItems": _link("items-list_items", "The collection's items", {"name": NAME}),
    },
    ("/v1/collections/{name}/items", "post", "202"): {
        "ReadJob": _link("items-read_job", "The ingest job's progress", {"job_id": "$response.body#/id"}),
    },
    ("/v1/collections/{name}/items", "get", "200"): _item_links("$response.body#/data/0/id"),
    ("/v1/collections/{name}/items/{item_id}", "get", "200"): {
        name: link for name, link in _item_links("$response.body#/id").items() if name != "ReadItem"},
    ("/v1/collections/{name}/items/{item_id}", "delete", "204"): {
        "ReadDeletedItem": _link("items-read_item", "404 from now on", {"name": NAME, "item_id": "$request.path.item_id"}),
    },
    ("/v1/collections/{name}/search", "post", "200"): _item_links("$response.body#/results/0/id"),
    ("/v1/collections/{name}/judgments", "post", "200"): {
        "ListJudgments": _link("judgments-list_judgments", "The query's judgments",
                               {"name": NAME, "qid": "$response.body#/qid"}),
        "StoreRuns": _link("judgments-create_runs", "Rankings to compare for the query", {"name": NAME},
                           {"qid": "$response.body#/qid"}),
    },
    ("/v1/collections/{name}/judgments/runs", "post", "200"): {
        "ReadConfidence": _link("judgments-read_confidence", "The comparison's confidence", {"name": NAME}),
    },
    ("/v1/keys", "post", "201"): {
        "DeleteKey": _link("keys-delete_key", "Revoke the new key", {"key_id": "$response.body#/id"}),
    },
}


def add_links(spec: dict[str, Any]) -> None:
    """Put :data:`LINKS` into ``spec`` (a copy); fails loudly when a source response is gone."""
    operations = {op["operationId"] for ops in spec["paths"].values() for op in ops.values()}
    for (path, method, status), links in LINKS.items():
        operation = spec["paths"].get(path, {}).get(method)
        if operation is None:  # the judgments routes come with the page (app.web); without it, no links to them
            continue
        response = operation["responses"][status]  # KeyError: a link from a status the route no longer has
        response["links"] = {name: link for name, link in links.items() if link["operationId"] in operations}
