"""Regressions found by the schemathesis fuzz (tests/reliability/test_fuzz_api.py, bench/reliability/fuzz.py).

Moved out of test_bad_input.py, which they shared a seeded service with (tests/api/seeded_service.py).
"""

import base64

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.api.seeded_service import _snapshot, seeded  # noqa: F401 (a fixture)
from tests.conftest import error_of, make_settings, tone_wav



# --- found by the schemathesis fuzz (tests/reliability/test_fuzz_api.py, bench/reliability/fuzz.py) -------------
#
# Each of these answered 500 (or stored something that made later reads answer 500). The class of
# bug: a value the core cannot hold got past the edge. The fixes: every integer is bounded by the
# schema, request JSON is strict (app/api/strict.py), error bodies always serialise.

def _judge_state(client):
    """What the judgment routes answer: a broken run or qrels file makes these 500."""
    runs = client.get("/v1/collections/a/judgments/confidence")
    listed = client.get("/v1/collections/a/judgments")
    assert runs.status_code == 200 and listed.status_code == 200, (runs.text, listed.text)
    return runs.json()["systems"], listed.json()["count"]


@pytest.mark.parametrize("query", [
    "offset=36147009694030225408",  # the issue's: past 2**63, overflowed the catalog's integer
    "offset=9223372036854775808",  # 2**63 exactly
    "offset=9007199254740992",  # MAX_OFFSET + 1
    "offset=-1",
    "limit=36147009694030225408",
    "limit=0",
    "limit=1001",  # limits.max_page_size + 1
])
def test_out_of_range_page_parameters_are_422(seeded, query):
    before = _snapshot(seeded)
    response = seeded.get(f"/v1/collections/a/items?{query}")
    assert response.status_code == 422, response.text
    assert query.split("=")[0] in error_of(response)["message"]
    assert _snapshot(seeded) == before


def test_the_largest_offset_is_an_empty_page(seeded):
    from app.api.schemas import MAX_OFFSET

    response = seeded.get(f"/v1/collections/a/items?offset={MAX_OFFSET}&limit=1000")
    assert response.status_code == 200, response.text
    assert response.json()["data"] == [] and response.json()["count"] == 1


HUGE = [2**63, 36147009694030225408, -(2**63) - 1, 10**100]


@pytest.mark.parametrize("field", ["k", "oversample", "segments_per_item", "rerank_top"])
@pytest.mark.parametrize("value", HUGE)
def test_out_of_range_search_integers_are_422_in_json_and_form(seeded, field, value):
    response = seeded.post("/v1/collections/a/search", json={"item_id": "keep.wav", field: value})
    assert response.status_code == 422, response.text
    assert field in error_of(response)["message"]
    response = seeded.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav())}, data={field: str(value)})
    assert response.status_code == 422, response.text
    assert field in error_of(response)["message"]


@pytest.mark.parametrize("value", HUGE)
def test_out_of_range_judgment_integers_are_422(seeded, value):
    before = _judge_state(seeded)
    response = seeded.post("/v1/collections/a/judgments", json={"qid": "q", "doc": "keep.wav", "grade": value})
    assert response.status_code == 422, response.text
    response = seeded.get(f"/v1/collections/a/judgments/confidence?k={value}")
    assert response.status_code == 422, response.text
    assert _judge_state(seeded) == before


BAD_RUNS = [
    # the issue's: an empty item id, which the run file cannot hold (500 from write_run)
    ("empty item id", {"query": None, "runs": {"99N-": [{"id": "", "score": 0.0}]}, "qid": "{I"}),
    # a repeated item was stored, then every later read of the run file failed
    ("item ranked twice", {"qid": "q", "runs": {"a": [{"id": "keep.wav", "score": 1}, {"id": "keep.wav", "score": 0.5}]}}),
    # a leading '#' made the line a comment: acknowledged, then never read back
    ("qid read as a comment", {"qid": "#q", "runs": {"a": [{"id": "keep.wav", "score": 1}]}}),
    ("qid with a space", {"qid": "q 1", "runs": {"a": [{"id": "keep.wav", "score": 1}]}}),
    ("empty qid", {"qid": "", "runs": {"a": [{"id": "keep.wav", "score": 1}]}}),
    ("configuration name with a slash", {"qid": "q", "runs": {"../x": [{"id": "keep.wav", "score": 1}]}}),
    ("no configurations", {"qid": "q", "runs": {}}),
]


@pytest.mark.parametrize("case,body", BAD_RUNS, ids=[c[0] for c in BAD_RUNS])
def test_bad_runs_are_422_and_the_run_files_stay_readable(seeded, case, body):
    good = {"qid": "q0", "runs": {"a": [{"id": "keep.wav", "score": 1}], "b": [{"id": "keep.wav", "score": 2}]}}
    assert seeded.post("/v1/collections/a/judgments/runs", json=good).status_code == 200
    before = _judge_state(seeded)
    response = seeded.post("/v1/collections/a/judgments/runs", json=body)
    assert response.status_code == 422, response.text
    error_of(response)
    assert _judge_state(seeded) == before


def test_a_judgment_whose_qid_would_be_a_comment_is_422(seeded):
    before = _judge_state(seeded)
    response = seeded.post("/v1/collections/a/judgments", json={"qid": "#q", "doc": "keep.wav", "grade": 2})
    assert response.status_code == 422, response.text
    assert "qid" in error_of(response)["message"]
    assert _judge_state(seeded) == before


# Not JSON as RFC 8259 defines it, though Python's parser took each: NaN stored in a run file broke
# every later read of it; 1e400 (infinity) and NaN echoed in a 422 made the error unserialisable
# (500); a lone surrogate cannot be encoded by SQLite or the response; deep nesting and a 5,000-digit
# number raised RecursionError / ValueError (500 on ingest and search).
NOT_JSON = [
    ("NaN", '{"qid": "q", "runs": {"a": [{"id": "keep.wav", "score": NaN}]}}'),
    ("Infinity", '{"x": -Infinity}'),
    ("1e400", '{"k": 1e400, "grade": 1e400, "window_s": 1e400}'),
    ("lone surrogate", '{"name": "x\\ud800", "item_id": "\\udfff", "qid": "q", "doc": "\\ud800"}'),
    ("lone surrogate key", '{"\\ud800": 1}'),
    ("deep nesting", '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    ("5000-digit integer", '{"k": ' + "9" * 5000 + "}"),
]
JSON_ROUTES = ["/v1/collections", "/v1/collections/a/items", "/v1/collections/a/search", "/v1/collections/a/judgments",
               "/v1/collections/a/judgments/runs", "/v1/keys"]


def test_every_json_body_route_is_in_the_list(seeded):
    # a new route with a JSON body must be added above (and parse strictly: StrictRoute or read_json)
    spec = seeded.app.openapi()
    with_json = {path.replace("{name}", "a") for path, operations in spec["paths"].items() for op in operations.values()
                 if "application/json" in op.get("requestBody", {}).get("content", {})}
    assert with_json == set(JSON_ROUTES)


@pytest.mark.parametrize("case,text", NOT_JSON, ids=[c[0] for c in NOT_JSON])
@pytest.mark.parametrize("path", JSON_ROUTES)
def test_json_outside_the_standard_is_400_on_every_route(seeded, case, text, path):
    before = _snapshot(seeded), _judge_state(seeded)
    response = seeded.post(path, content=text.encode(), headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert error_of(response)["code"] == "bad_request"
    assert (_snapshot(seeded), _judge_state(seeded)) == before


@pytest.mark.parametrize("data", [
    {"metadata": '{"x": NaN}'}, {"metadata": '{"x": 1e400}'}, {"metadata": '[{"\\ud800": 1}]'}, {"metadata": "[" * 100_000},
])
def test_form_metadata_outside_the_standard_is_400(seeded, data):
    before = _snapshot(seeded)
    response = seeded.post("/v1/collections/a/items", files=[("files", ("n.wav", tone_wav()))], data=data)
    assert response.status_code == 400, response.text
    assert "metadata" in error_of(response)["message"]
    assert _snapshot(seeded) == before


@pytest.mark.parametrize("data,status", [
    ({"filter": '{"x": NaN}'}, 400), ({"filter": "{" * 100_000}, 400),
    ({"max_distance": "inf"}, 422), ({"max_distance": "nan"}, 422), ({"nms_iou": "nan"}, 422),
])
def test_form_search_fields_outside_the_standard_are_refused(seeded, data, status):
    response = seeded.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav())}, data=data)
    assert response.status_code == status, response.text
    error_of(response)


@pytest.mark.parametrize("body", [{"name": "w", "modality": "audio", "window_s": "nan"},
                                  {"name": "w", "modality": "audio", "hop_s": "inf"}])
def test_non_finite_collection_floats_are_422(seeded, body):
    before = _snapshot(seeded)
    response = seeded.post("/v1/collections", json=body)
    assert response.status_code == 422, response.text
    assert _snapshot(seeded) == before


def test_an_error_body_serialises_whatever_input_it_echoes():
    import json

    from app.api.error_handlers import _safe_body

    nested: list = []
    for _ in range(5000):  # deeper than a recursive walk goes
        nested = [nested]
    body = _safe_body({"error": {"code": "x", "message": "m", "details": [
        {"input": float("nan"), "big": 1e308 * 10, "s": "a\ud800b", "ctx": {"error": ValueError("no")}, "loc": ("body", 1)}]}})
    text = json.dumps(body, allow_nan=False).encode("utf-8")  # what JSONResponse does: must not raise
    detail = json.loads(text)["error"]["details"][0]
    assert detail == {"input": "nan", "big": "inf", "s": "a\\ud800b", "ctx": {"error": "no"}, "loc": ["body", 1]}
    deep = _safe_body({"error": {"code": "x", "message": "m", "details": nested}})
    assert deep["error"]["details"] is None and deep["error"]["message"] == "m"


def _request_schemas(spec):
    """(where, schema) of every parameter and request body schema node in the document."""
    def walk(where, node):
        if isinstance(node, dict):
            if "$ref" in node:  # "#/components/schemas/Name"
                yield from walk(where, spec["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]])
                return
            yield where, node
            for key in ("properties", "patternProperties"):
                for name, child in node.get(key, {}).items():
                    yield from walk(f"{where}.{name}", child)
            for key in ("items", "additionalProperties"):
                if isinstance(node.get(key), dict):
                    yield from walk(f"{where}[]", node[key])
            for child in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
                yield from walk(where, child)

    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                yield from walk(f"{method.upper()} {path} {parameter['in']}.{parameter['name']}", parameter["schema"])
            for media, content in operation.get("requestBody", {}).get("content", {}).items():
                yield from walk(f"{method.upper()} {path} {media}", content["schema"])


def test_every_integer_a_request_can_carry_is_bounded_by_the_document(seeded):
    # The class of bug behind the offset overflow: an integer without a maximum reaches the catalog
    # or an index whatever its size. A new unbounded integer field fails here.
    spec = seeded.app.openapi()
    integers = [(where, s) for where, s in _request_schemas(spec) if s.get("type") == "integer"]
    assert len(integers) >= 9  # limit, offset, k (search, confidence), oversample, segments, rerank_top, grade
    unbounded = [where for where, s in integers if "minimum" not in s or "maximum" not in s]
    assert not unbounded, unbounded


def test_the_document_carries_the_configured_limits(tmp_path):
    settings = make_settings(tmp_path, limits={"max_k": 7, "max_page_size": 9, "max_files": 3, "max_text_chars": 11})
    with TestClient(create_app(settings)) as client:
        spec = client.get("/openapi.json").json()["paths"]
        search = spec["/v1/collections/{name}/search"]["post"]["requestBody"]["content"]
        assert {media: body["schema"]["properties"]["k"]["maximum"] for media, body in search.items()} == {
            "application/json": 7, "multipart/form-data": 7}
        limit = next(p for p in spec["/v1/collections/{name}/items"]["get"]["parameters"] if p["name"] == "limit")
        assert limit["schema"]["maximum"] == 9
        ingest = spec["/v1/collections/{name}/items"]["post"]["requestBody"]["content"]
        assert ingest["application/json"]["schema"]["properties"]["items"]["maxItems"] == 3
        assert ingest["multipart/form-data"]["schema"]["properties"]["files"]["maxItems"] == 3
        # and what it says is what the service does
        client.post("/v1/collections", json={"name": "a", "modality": "audio"})
        client.post("/v1/collections/a/items", files=[("files", ("keep.wav", tone_wav()))])
        assert client.post("/v1/collections/a/search", json={"item_id": "keep.wav", "k": 7}).status_code == 200
        assert client.post("/v1/collections/a/search", json={"item_id": "keep.wav", "k": 8}).status_code == 422
        assert client.get("/v1/collections/a/items?limit=9").status_code == 200
        assert client.get("/v1/collections/a/items?limit=10").status_code == 422
    # another app of the same process keeps the defaults: the bounds are per app, not module data
    other = create_app(make_settings(tmp_path / "other")).openapi()["paths"]["/v1/collections/{name}/search"]
    assert other["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]["k"]["maximum"] == 1000


# Lax coercion let the fuzz's schema-violating values through (negative_data_rejection): a boolean
# as a score, a string as a count. A JSON body's types are the document's; only a multipart form,
# which carries text, converts "5" to 5.
WRONG_JSON_TYPES = [
    ("/v1/collections/a/judgments/runs", {"qid": "q", "runs": {"a": [{"id": "keep.wav", "score": False}]}}),
    ("/v1/collections/a/judgments/runs", {"qid": "q", "runs": {"a": [{"id": 7, "score": 1}]}}),
    ("/v1/collections/a/judgments", {"qid": "q", "doc": "keep.wav", "grade": True}),
    ("/v1/collections/a/judgments", {"qid": "q", "doc": "keep.wav", "grade": "2"}),
    ("/v1/collections/a/search", {"item_id": "keep.wav", "k": "5"}),
    ("/v1/collections/a/search", {"item_id": "keep.wav", "rerank": "yes"}),
    ("/v1/collections/a/search", {"item_id": "keep.wav", "nms_iou": "0.5"}),
    ("/v1/collections", {"name": "typed", "modality": "audio", "window_s": "1.0"}),
    ("/v1/collections", {"name": "typed", "modality": "audio", "keep_media": 1}),
    ("/v1/collections/a/items", {"items": [{"id": 5, "content_base64": base64.b64encode(tone_wav()).decode()}]}),
]


@pytest.mark.parametrize("path,body", WRONG_JSON_TYPES, ids=[f"{p.rsplit('/', 1)[-1]}-{sorted(b)[0]}-{n}" for n, (p, b) in enumerate(WRONG_JSON_TYPES)])
def test_json_values_of_the_wrong_type_are_422(seeded, path, body):
    before = _snapshot(seeded), _judge_state(seeded)
    response = seeded.post(path, json=body)
    assert response.status_code == 422, response.text
    error_of(response)
    assert (_snapshot(seeded), _judge_state(seeded)) == before


def test_a_form_still_sends_numbers_as_text(seeded):
    response = seeded.post("/v1/collections/a/search", files={"file": ("q.wav", tone_wav())},
                           data={"k": "5", "nms_iou": "0.5", "rerank": "true"})
    assert response.status_code == 200, response.text
    # and JSON integers are fine where a float is documented
    assert seeded.post("/v1/collections/a/search", json={"item_id": "keep.wav", "nms_iou": 1, "max_distance": 0}).status_code == 200


def test_confidence_over_only_empty_rankings_is_no_estimate(seeded):
    """Regression (found by bench/reliability/fuzz.py): runs of empty rankings made the confidence divide by
    zero queries (500 on every later GET .../confidence)."""
    stored = seeded.post("/v1/collections/a/judgments/runs", json={"qid": "q", "runs": {"a": [], "b": []}})
    assert stored.status_code == 200, stored.text
    response = seeded.get("/v1/collections/a/judgments/confidence")
    assert response.status_code == 200, response.text
    assert response.json()["confidence"] is None and "empty" in response.json()["reason"]
    # once a configuration ranks something, there is an estimate
    seeded.post("/v1/collections/a/judgments/runs", json={"qid": "q", "runs": {"a": [{"id": "keep.wav", "score": 1}]}})
    assert seeded.get("/v1/collections/a/judgments/confidence").json()["confidence"] is not None


def test_media_replaced_or_deleted_while_it_is_sent_still_arrives_whole(seeded, monkeypatch):
    """Regression (found by bench/reliability/fuzz.py): FileResponse opened the stored file only after sending the
    headers, so a concurrent upsert or delete of the item broke the answer mid-way. The file is now
    open before the answer starts; removing it meanwhile changes nothing for this reader."""
    from app.api.routes import items as item_routes

    original = seeded.get("/v1/collections/a/items/keep.wav/media").content
    stream = item_routes._chunks

    def delete_first(handle):
        assert seeded.delete("/v1/collections/a/items/keep.wav").status_code == 204  # its file is gone now
        yield from stream(handle)

    monkeypatch.setattr(item_routes, "_chunks", delete_first)
    response = seeded.get("/v1/collections/a/items/keep.wav/media")
    assert response.status_code == 200 and response.content == original
    assert response.headers["content-length"] == str(len(original))
    assert response.headers["content-disposition"] == 'attachment; filename="keep.wav"'
    monkeypatch.setattr(item_routes, "_chunks", stream)
    gone = seeded.get("/v1/collections/a/items/keep.wav/media")
    assert gone.status_code == 404, gone.text
    error_of(gone)


def test_media_whose_file_vanished_is_404(seeded, tmp_path):
    import os

    for path in (tmp_path / "data" / "media").rglob("*.wav"):  # the fixture's data directory
        os.unlink(path)
    response = seeded.get("/v1/collections/a/items/keep.wav/media")
    assert response.status_code == 404, response.text
    assert "missing" in error_of(response)["message"]


@pytest.mark.parametrize("path", [
    "/v1/collections/a/items?limit=5&limit=6",
    "/v1/collections/a/items?offset=0&offset=1",
    "/v1/collections/a/judgments?qid=a&qid=b",
    "/v1/collections/a/judgments/confidence?k=5&k=6",
    "/v1/collections/a/judgments/confidence?systems=a&systems=b",
])
def test_a_scalar_query_parameter_given_twice_is_422(seeded, path):
    """Regression (found by the fuzz as accepted negative data): FastAPI answered ?qid=a&qid=b as if
    only the last value had been sent; the document gives these parameters one value."""
    response = seeded.get(path)
    assert response.status_code == 422, response.text
    assert "one value" in error_of(response)["message"]
    assert seeded.get(path.split("&")[0]).status_code == 200


def test_a_repeated_wait_on_ingest_is_422_and_stores_nothing(seeded):
    before = _snapshot(seeded)
    response = seeded.post("/v1/collections/a/items?wait=true&wait=false", files=[("files", ("w.wav", tone_wav()))])
    assert response.status_code == 422, response.text
    assert _snapshot(seeded) == before
