"""The search route documents every error it can answer, in the one error shape."""

from __future__ import annotations


def test_search_lists_its_error_responses(client) -> None:
    spec = client.get("/openapi.json").json()
    responses = spec["paths"]["/v1/collections/{name}/search"]["post"]["responses"]
    assert {"400", "401", "404", "409", "413", "415", "422", "429", "503"} <= set(responses)
    example = responses["503"]["content"]["application/json"]["example"]
    assert set(example["error"]) == {"code", "message", "details"}
    demo = spec["paths"]["/v1/demo"]["post"]["responses"]
    assert demo["503"]["description"] == "the service is still starting" and "500" in demo
