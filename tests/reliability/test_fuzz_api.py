"""Schemathesis over every route of the OpenAPI document, with and without an API key.

Against the real service on loopback (uvicorn, API keys on, a few seeded collections, items and a
job), every operation gets generated requests - valid and invalid path parameters, query strings,
JSON and multipart bodies - and every response is checked by schemathesis: no 5xx, a status code
the route documents, the documented content type, and a body matching the documented schema (the
one error shape for every error). Generation is derandomised and bounded per route, so a run is
repeatable and its cost fixed; a failure prints the request that reproduces it.
"""

from __future__ import annotations

import base64
import json
import tempfile
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
import schemathesis
from schemathesis.config import HealthCheck
from hypothesis import strategies as st
from schemathesis.specs.openapi.checks import allow_header_conformance, negative_data_rejection, positive_data_acceptance

from app.main import create_app
from tests.conftest import make_settings, png_bytes, tone_wav
from tests.live_server import live_server

KEY = "fuzz-key-1"
# examples per route and generation mode (positive, negative): ~25 routes x 2 modes x this
MAX_EXAMPLES = 20
# the same bounded search without a key: every /v1 route answers 401 before reading anything
MAX_EXAMPLES_NO_KEY = 5

# seeded values the path-parameter strategies mix in, so generated requests reach real
# collections, items and jobs instead of only answering 404
NAMES = ["fz-audio", "fz-image"]
STORED = [{"name": "fz-audio", "item_id": i} for i in ("a1", "a2", "sub/dir.wav")] + [{"name": "fz-image", "item_id": "i1"}]
# what the DELETE routes may remove: a whole collection, or one item of fz-audio
SCRATCH = {"/v1/collections/{name}": {"name": "fz-scratch"},
           "/v1/collections/{name}/items/{item_id}": {"name": "fz-audio", "item_id": "scratch-item"},
           "/v1/keys/{key_id}": {"key_id": "set-by-seed"}}  # a key made by _seed (ids are random)


_MEDIA = [("fz-audio", tone_wav(440)), ("fz-audio", tone_wav(523, seconds=2.0)), ("fz-image", png_bytes((20, 40, 200)))]
# (collection, body) pairs a route accepts; flatmap_case swaps them into some positive cases
CLEAN_BODIES = {
    ("POST", "/v1/collections/{name}/items", "multipart/form-data"): [(c, {"files": [m]}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/items", "application/json"): [
        (c, {"items": [{"id": "fz-new", "content_base64": base64.b64encode(m).decode()}]}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/search", "multipart/form-data"): [(c, {"file": m, "k": 3}) for c, m in _MEDIA],
    ("POST", "/v1/collections/{name}/search", "application/json"): [("fz-audio", {"item_id": i, "k": 3}) for i in ("a1", "a2")],
    ("POST", "/v1/collections/{name}/judgments", "application/json"): [
        ("fz-audio", {"qid": "q1", "doc": i, "grade": 2}) for i in ("a1", "a2")],
    ("POST", "/v1/collections/{name}/judgments/runs", "application/json"): [
        ("fz-audio", {"qid": "q1", "runs": {"a": [{"id": "a1", "score": 1.0}], "b": [{"id": "a2", "score": 0.5}]}})],
}


def _seed(url: str) -> dict[str, list[str]]:
    with httpx.Client(base_url=url, headers={"X-API-Key": KEY}, timeout=60) as http:
        for name, modality in [("fz-audio", "audio"), ("fz-image", "image"), ("fz-scratch", "audio")]:
            http.post("/v1/collections", json={"name": name, "modality": modality}).raise_for_status()
        files = [("files", ("a1.wav", tone_wav(440))), ("files", ("a2.wav", tone_wav(660))),
                 ("files", ("sub.wav", tone_wav(880))), ("files", ("scratch.wav", tone_wav(300)))]
        http.post("/v1/collections/fz-audio/items", files=files[:3], data={
            "ids": "a1,a2,sub/dir.wav", "metadata": json.dumps([{"speaker": "x"}, {"speaker": "y"}, {}])}).raise_for_status()
        http.post("/v1/collections/fz-audio/items", files=[files[3]], data={"ids": "scratch-item"}).raise_for_status()
        http.post("/v1/collections/fz-image/items", files=[("files", ("i1.png", png_bytes((200, 30, 30))))],
                  data={"ids": "i1"}).raise_for_status()
        SCRATCH["/v1/keys/{key_id}"]["key_id"] = http.post("/v1/keys", json={"scopes": ["read"]}).raise_for_status().json()["id"]
        job = http.post("/v1/collections/fz-audio/items?wait=false", files=[("files", ("j.wav", tone_wav(500)))])
        assert job.status_code == 202, job.text
        return {"job_id": [job.json()["id"]]}


# the document is built without starting the service (create_app runs nothing heavy), so each
# route becomes its own test at collection; the test below checks the served one is the same
SPEC = create_app(make_settings(Path(tempfile.gettempdir()) / "recall-fuzz-spec", api_keys=[KEY])).openapi()
SEEDED: dict[str, list[str]] = {}  # filled by the fixture: ids only known once the service runs
REPLACED: set[int] = set()  # cases whose body flatmap_case swapped for a known-valid one
SEEN: dict[str, set[int]] = defaultdict(set)  # operation label -> status codes answered (keyed pass)


@pytest.fixture(scope="module")
def fuzz_service(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("fuzz"), api_keys=[KEY],
                             limits={"max_upload_bytes": 2_000_000, "sync_ingest_files": 3})
    with live_server(settings) as url:
        SEEDED.update(_seed(url))
        yield url


def _build_schema(max_examples: int):
    schema = schemathesis.openapi.from_dict(SPEC)
    schema.config.generation.update(max_examples=max_examples, deterministic=True)
    # generation speed depends on how busy the machine is; a slow draw must not fail the run
    schema.config.suppress_health_check = [HealthCheck.too_slow, HealthCheck.filter_too_much]

    @schema.hook
    def flatmap_path_parameters(context, path_parameters):
        # the generated value or one of the seeded ones, equally likely; DELETE routes get only a
        # scratch target to remove, so the other routes keep their collections and items
        if not path_parameters:
            return st.just(path_parameters)
        if context.operation.method.upper() == "DELETE":
            return st.sampled_from([path_parameters, SCRATCH[context.operation.path]])
        if "item_id" in path_parameters:  # a stored item: both parameters must agree
            return st.one_of(st.just(path_parameters), st.sampled_from(STORED).map(lambda p: {**path_parameters, **p}))
        defaults = {"name": NAMES}
        choices = {}
        for key, value in path_parameters.items():
            seeded = SEEDED.get(key, defaults.get(key, []))
            choices[key] = st.sampled_from([value, *seeded]) if seeded else st.just(value)
        return st.fixed_dictionaries(choices)

    @schema.hook
    def flatmap_case(context, case):
        # Generated bodies rarely get past decoding (random bytes) or id lookups; mix in requests
        # built from real media and stored ids, so the success paths are fuzzed too.
        clean = CLEAN_BODIES.get((case.operation.method.upper(), case.operation.path, case.media_type))
        positive = case.meta is not None and case.meta.generation.mode == schemathesis.GenerationMode.POSITIVE
        if clean is None or not positive or case.method.upper() != case.operation.method.upper():
            return st.just(case)
        return st.one_of(st.just(case), st.sampled_from(clean).map(lambda pair: _with_body(case, *pair)))

    return schema


def _with_body(case, collection, body):
    case.path_parameters = {**(case.path_parameters or {}), "name": collection}
    case.body = body
    REPLACED.add(id(case))
    return case


def _record(schema):
    @schema.hook
    def after_call(context, case, response):
        if case.method.upper() == case.operation.method.upper():
            SEEN[case.operation.label].add(response.status_code)

    return schema


# Every other built-in check runs. This one expects any schema-valid request to be accepted; but a
# `format: binary` part is schema-valid whatever its bytes (the service answers 415/422 for what it
# cannot decode), and cross-field rules (hop_s <= window_s, one id per file) are not expressible in
# the schema. Invalid requests must still be refused with a 4xx (negative_data_rejection runs).
EXCLUDED = [positive_data_acceptance]

keyed = _record(_build_schema(MAX_EXAMPLES))
keyless = _build_schema(MAX_EXAMPLES_NO_KEY)


def _excluded(case) -> list:
    # a swapped-in valid body is no negative test, whatever mode the case was generated in
    excluded = EXCLUDED + ([negative_data_rejection] if id(case) in REPLACED else [])
    if case.operation.path.endswith("/media"):
        # DELETE .../items/x/media is a real request: it deletes the item "x/media" (ids may hold
        # '/'), so Allow rightly lists DELETE although the document's /media entry has only GET
        excluded.append(allow_header_conformance)
    return excluded


def test_the_served_document_is_the_fuzzed_one(fuzz_service):
    assert httpx.get(f"{fuzz_service}/openapi.json").json() == SPEC


@keyed.parametrize()
def test_every_route_with_a_key(case, fuzz_service):
    case.call_and_validate(base_url=fuzz_service, headers={"X-API-Key": KEY}, excluded_checks=_excluded(case), timeout=60)


@keyless.parametrize()
def test_every_route_without_a_key(case, fuzz_service):
    response = case.call_and_validate(base_url=fuzz_service, excluded_checks=_excluded(case), timeout=60)
    if case.path.startswith("/v1/") and case.method.upper() == case.operation.method.upper():  # not an undeclared-method probe
        assert response.status_code in (401, 413), (case.method, case.path, response.status_code)


def test_the_fuzz_reached_every_route_and_its_errors(fuzz_service):
    """Not only 404s: each route answered a success, and together they answered many error codes."""
    if len(SEEN) < sum(len(operations) for operations in SPEC["paths"].values()):
        pytest.skip("run with the keyed fuzz tests (it reads what they saw)")
    unreached = {label: sorted(codes) for label, codes in SEEN.items() if not any(200 <= c < 300 for c in codes)}
    assert not unreached, f"routes the fuzz never got a success from: {unreached}"
    errors = set().union(*SEEN.values()) - set(range(200, 300))
    assert {400, 404, 422} <= errors, errors
