"""Every error code the OpenAPI document lists for a route can actually occur, and nothing else is listed.

PROVOKE is a table of (method, route, code) -> a request that makes that route answer that code. One
test checks the table's keys equal the document's error codes (a new route, or a code added to or
removed from a route, fails it until the table says how to provoke it); one test per entry sends the
request and checks the status and the one error shape. The schemathesis fuzz
(test_fuzz_api.py) checks the other direction: no route answers a code it does not list.
"""

from __future__ import annotations

import dataclasses
import errno
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Callable

import pytest
from fastapi.testclient import TestClient

from app.api.auth import required_scopes
from app.main import create_app
from app.storage import media_store
from app.usecases import demo_data, judging
from app.usecases import keys as keys_module
from app.usecases.keys import KeyFile
from tests.conftest import error_of, make_settings, tone_wav
from tests.reliability.disk_faults import FailingOs, FullDb

KEY = "table-key"
LIMIT = 300_000  # max_upload_bytes: a 1 s clip fits, a 400 kB body does not
BAD_UTF8 = b"\xff\xfe{"  # not even text: the JSON parser refuses it (400), before any field is looked at
TEXT_FILE = ("notes.txt", b"this is plain text, not audio or an image\n" * 20)

Route = tuple[str, str]


# --- the requests ---------------------------------------------------------------------------

def _good(route: Route) -> dict:
    """A request the route accepts (or at least parses) when the key is sent and the service is up."""
    wav = [("files", ("t.wav", tone_wav(700)))]
    return {
        ("POST", "/v1/collections"): {"json": {"name": "fresh", "modality": "audio"}},
        ("POST", "/v1/collections/{name}/items"): {"files": wav},
        ("POST", "/v1/collections/{name}/search"): {"json": {"item_id": "a1", "k": 2}},
        ("POST", "/v1/collections/{name}/judgments"): {"json": {"qid": "q1", "doc": "a1", "grade": 2}},
        ("POST", "/v1/collections/{name}/judgments/runs"): {"json": {"qid": "q1", "runs": {"x": [{"id": "a1", "score": 1}]}}},
        ("POST", "/v1/keys"): {"json": {"scopes": ["read"]}},
    }.get(route, {})


def send(ctx, route: Route, *, key: bool = True, name: str = "au", item: str = "a1", job: str | None = None,
         key_id: str = "no-such-key", **request):
    method, template = route
    path = template.format(name=name, item_id=item, job_id=job or ctx.job, key_id=key_id)
    headers = {"X-API-Key": KEY} if key else {}
    request = request or _good(route)
    headers.update(request.pop("headers", {}))
    return ctx.client.request(method, path, headers=headers, **request)


@contextmanager
def not_loaded(ctx):
    """The state while the service is starting (encoders and indices loading): /v1 answers 503."""
    ctx.services.loaded = False
    try:
        yield
    finally:
        ctx.services.loaded = True


@contextmanager
def slow_encoder(ctx):
    """One request busy in the model, one queued (max_queue=1): a third has no room (429)."""
    encoder = ctx.services.encoders.encoders["audio-baseline"]
    original = encoder.encode

    def slow(batch):
        time.sleep(0.8)
        return original(batch)

    encoder.encode = slow
    try:
        yield
    finally:
        encoder.encode = original


def unauthorized(ctx, route):
    return send(ctx, route, key=False)


def unavailable(ctx, route):
    with not_loaded(ctx):
        return send(ctx, route)


def too_large(ctx, route):
    return send(ctx, route, content=b"x" * (LIMIT + 1), headers={"content-type": "application/json"})


def malformed(ctx, route):
    return send(ctx, route, content=BAD_UTF8, headers={"content-type": "application/json"})


def unknown_collection(ctx, route):
    return send(ctx, route, name="no-such-collection")


def old_checkpoint(ctx, route):
    # "old" was embedded with an encoder version this service does not have
    if route[1].endswith("/items"):
        return send(ctx, route, name="old")
    return send(ctx, route, name="old", files=[("file", ("q.wav", tone_wav(500)))])


def queue_full(ctx, route):
    def one(i: int):
        if route[1].endswith("/items"):
            return send(ctx, route, files=[("files", (f"q{i}.wav", tone_wav(300 + 50 * i)))], data={"ids": f"busy-{i}"})
        return send(ctx, route, files=[("file", ("q.wav", tone_wav(300 + 50 * i)))], data={"k": "1"})

    with slow_encoder(ctx), ThreadPoolExecutor(4) as pool:
        responses = list(pool.map(one, range(4)))
    refused = [r for r in responses if r.status_code == 429]
    return refused[0] if refused else responses[0]


def unsupported(ctx, route):
    field = "files" if route[1].endswith("/items") else "file"
    return send(ctx, route, files=[(field, TEXT_FILE)])


def disk_full(ctx, route):
    """The data directory's disk full: ingest meets it storing the original (the real write path, fsync
    failing with ENOSPC), a judgment in its file, every other write in the catalog (SQLite's "database or disk is full")."""
    if route == ("POST", "/v1/collections/{name}/items"):
        ctx.monkeypatch.setattr(media_store, "os", FailingOs(errno.ENOSPC))
    elif "/judgments" in route[1]:  # judgments are files: the append's fsync fails
        ctx.monkeypatch.setattr(judging, "os", FailingOs(errno.ENOSPC))
    else:
        ctx.monkeypatch.setattr(ctx.services.catalog, "_db", FullDb(ctx.services.catalog._db))
    return send(ctx, route)


def forbidden(ctx, route):
    """A valid key without the route's scope (app/api/auth.py): a write-only key on a read route, else read-only."""
    needed = required_scopes(*route)
    return send(ctx, route, headers={"X-API-Key": ctx.write_key if needed == {"read"} else ctx.read_key})


def rate_limited(ctx, route):
    """A key whose bucket is empty: one token and almost no refill, spent on a cheap request first."""
    limiter = ctx.client.app.state.guard.limiter
    ctx.monkeypatch.setattr(limiter, "rate", 0.001)
    ctx.monkeypatch.setattr(limiter, "burst", 1)
    headers = {"X-API-Key": ctx.limited_key}
    ctx.client.get("/v1/encoders", headers=headers)
    response = send(ctx, route, headers=headers)
    assert response.status_code != 429 or int(response.headers["retry-after"]) >= 1
    return response


def key_file_fails(err: int):
    """The key file's write failing as a full (ENOSPC) or read-only (EROFS) disk makes it fail."""
    def provoke(ctx, route):
        ident = KeyFile(ctx.keys_path).create("read")[1].id  # something to revoke
        ctx.monkeypatch.setattr(keys_module, "os", FailingOs(err))
        return send(ctx, route, key_id=ident)
    return provoke


def demo_missing(ctx, route):
    ctx.monkeypatch.setattr(demo_data, "DEMO_DIR", ctx.tmp / "no-demo-here")
    return send(ctx, route)


ITEMS = "/v1/collections/{name}/items"
SEARCH = "/v1/collections/{name}/search"
JUDGMENTS = "/v1/collections/{name}/judgments"
ITEM = "/v1/collections/{name}/items/{item_id}"

PROVOKE: dict[tuple[str, str, int], Callable] = {
    ("GET", "/readyz", 503): unavailable,
    ("GET", "/v1/encoders", 401): unauthorized,
    ("GET", "/v1/encoders", 503): unavailable,
    ("GET", "/v1/collections", 401): unauthorized,
    ("GET", "/v1/collections", 503): unavailable,
    ("POST", "/v1/collections", 400): malformed,
    ("POST", "/v1/collections", 401): unauthorized,
    ("POST", "/v1/collections", 409): lambda ctx, r: send(ctx, r, json={"name": "au", "modality": "audio"}),
    ("POST", "/v1/collections", 413): too_large,
    ("POST", "/v1/collections", 422): lambda ctx, r: send(ctx, r, json={"name": "no spaces allowed", "modality": "audio"}),
    ("POST", "/v1/collections", 503): unavailable,
    ("POST", "/v1/collections", 507): disk_full,
    ("GET", "/v1/collections/{name}", 401): unauthorized,
    ("GET", "/v1/collections/{name}", 404): unknown_collection,
    ("GET", "/v1/collections/{name}", 503): unavailable,
    ("DELETE", "/v1/collections/{name}", 401): unauthorized,
    ("DELETE", "/v1/collections/{name}", 404): unknown_collection,
    ("DELETE", "/v1/collections/{name}", 503): unavailable,
    ("DELETE", "/v1/collections/{name}", 507): disk_full,
    ("POST", ITEMS, 400): malformed,
    ("POST", ITEMS, 401): unauthorized,
    ("POST", ITEMS, 404): unknown_collection,
    ("POST", ITEMS, 409): old_checkpoint,
    ("POST", ITEMS, 413): too_large,
    ("POST", ITEMS, 415): unsupported,
    ("POST", ITEMS, 422): lambda ctx, r: send(ctx, r, files=[("files", ("t.wav", tone_wav(700)))], data={"ids": "one,two"}),
    ("POST", ITEMS, 429): queue_full,
    ("POST", ITEMS, 503): unavailable,
    ("POST", ITEMS, 507): disk_full,
    ("GET", ITEMS, 401): unauthorized,
    ("GET", ITEMS, 404): unknown_collection,
    ("GET", ITEMS, 422): lambda ctx, r: send(ctx, r, params={"limit": 0}),
    ("GET", ITEMS, 503): unavailable,
    ("GET", ITEM + "/media", 401): unauthorized,
    ("GET", ITEM + "/media", 404): lambda ctx, r: send(ctx, r, item="no-such-item"),
    ("GET", ITEM + "/media", 503): unavailable,
    ("GET", ITEM, 401): unauthorized,
    ("GET", ITEM, 404): lambda ctx, r: send(ctx, r, item="no-such-item"),
    ("GET", ITEM, 503): unavailable,
    ("DELETE", ITEM, 401): unauthorized,
    ("DELETE", ITEM, 404): lambda ctx, r: send(ctx, r, item="no-such-item"),
    ("DELETE", ITEM, 503): unavailable,
    ("DELETE", ITEM, 507): disk_full,
    ("GET", "/v1/jobs/{job_id}", 401): unauthorized,
    ("GET", "/v1/jobs/{job_id}", 404): lambda ctx, r: send(ctx, r, job="0123456789abcdef"),
    ("POST", SEARCH, 400): malformed,
    ("POST", SEARCH, 401): unauthorized,
    ("POST", SEARCH, 404): unknown_collection,
    ("POST", SEARCH, 409): old_checkpoint,
    ("POST", SEARCH, 413): too_large,
    ("POST", SEARCH, 415): unsupported,
    ("POST", SEARCH, 422): lambda ctx, r: send(ctx, r, json={"item_id": "a1", "k": 0}),
    ("POST", SEARCH, 429): queue_full,
    ("POST", SEARCH, 503): unavailable,
    ("POST", JUDGMENTS, 400): malformed,
    ("POST", JUDGMENTS, 401): unauthorized,
    ("POST", JUDGMENTS, 404): lambda ctx, r: send(ctx, r, json={"qid": "q1", "doc": "no-such-item", "grade": 1}),
    ("POST", JUDGMENTS, 413): too_large,
    ("POST", JUDGMENTS, 422): lambda ctx, r: send(ctx, r, json={"qid": "q1", "doc": "a1", "grade": 7}),
    ("POST", JUDGMENTS, 503): unavailable,
    ("POST", JUDGMENTS, 507): disk_full,
    ("GET", JUDGMENTS, 401): unauthorized,
    ("GET", JUDGMENTS, 404): unknown_collection,
    # one value per scalar query parameter (app/api/strict.py); found by the fuzz as accepted negative data
    ("GET", JUDGMENTS, 422): lambda ctx, r: send(ctx, r, params=[("qid", "a"), ("qid", "b")]),
    ("GET", JUDGMENTS, 503): unavailable,
    ("POST", JUDGMENTS + "/runs", 400): malformed,
    ("POST", JUDGMENTS + "/runs", 401): unauthorized,
    ("POST", JUDGMENTS + "/runs", 404): unknown_collection,
    ("POST", JUDGMENTS + "/runs", 413): too_large,
    ("POST", JUDGMENTS + "/runs", 422): lambda ctx, r: send(ctx, r, json={"qid": "q1", "runs": {}}),
    ("POST", JUDGMENTS + "/runs", 503): unavailable,
    ("POST", JUDGMENTS + "/runs", 507): disk_full,
    ("GET", JUDGMENTS + "/confidence", 401): unauthorized,
    ("GET", JUDGMENTS + "/confidence", 404): unknown_collection,
    ("GET", JUDGMENTS + "/confidence", 422): lambda ctx, r: send(ctx, r, params={"k": 0}),
    ("GET", JUDGMENTS + "/confidence", 503): unavailable,
    ("POST", "/v1/demo", 401): unauthorized,
    ("POST", "/v1/demo", 500): demo_missing,
    ("POST", "/v1/demo", 503): unavailable,
    ("GET", "/v1/keys", 401): unauthorized,
    ("POST", "/v1/keys", 400): malformed,
    ("POST", "/v1/keys", 401): unauthorized,
    ("POST", "/v1/keys", 413): too_large,
    ("POST", "/v1/keys", 422): lambda ctx, r: send(ctx, r, json={"scopes": ["root"]}),
    ("POST", "/v1/keys", 503): key_file_fails(errno.EROFS),
    ("POST", "/v1/keys", 507): key_file_fails(errno.ENOSPC),
    ("DELETE", "/v1/keys/{key_id}", 401): unauthorized,
    ("DELETE", "/v1/keys/{key_id}", 404): lambda ctx, r: send(ctx, r),
    ("DELETE", "/v1/keys/{key_id}", 503): key_file_fails(errno.EROFS),
    ("DELETE", "/v1/keys/{key_id}", 507): key_file_fails(errno.ENOSPC),
}


# every route behind a key also answers 403 (a key without its scope) and 429 (its key over the rate)
for _method, _path, _code in list(PROVOKE):
    if _code == 401:
        PROVOKE[(_method, _path, 403)] = forbidden
        PROVOKE.setdefault((_method, _path, 429), rate_limited)


# --- the service ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def service(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("codes")
    settings = make_settings(tmp, api_keys=[KEY], limits={"max_upload_bytes": LIMIT},
                             batching={"max_batch_size": 1, "max_wait_ms": 0, "max_queue": 1})
    keys = KeyFile(settings.resolved_keys_file())  # scoped keys next to the all-scope KEY
    scoped = {f"{n}_key": keys.create(scopes)[0] for n, scopes in (("read", "read"), ("write", "write"),
                                                                    ("limited", "read,write,admin"))}
    with TestClient(create_app(settings)) as client:
        headers = {"X-API-Key": KEY}
        for name in ("au", "old"):
            assert client.post("/v1/collections", json={"name": name, "modality": "audio"}, headers=headers).status_code == 201
        ok = client.post("/v1/collections/au/items", files=[("files", ("a1.wav", tone_wav(440)))], data={"ids": "a1"}, headers=headers)
        assert ok.status_code == 200, ok.text
        job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", tone_wav(600)))], headers=headers)
        assert job.status_code == 202, job.text
        services = client.app_state["services"]  # the lifespan's state
        # "old" answers as if embedded with a checkpoint version this installation lacks
        state = services.collections["old"]
        state.collection = dataclasses.replace(state.collection, encoder_version="0-gone")
        yield SimpleNamespace(client=client, services=services, job=job.json()["id"], tmp=tmp,
                              spec=client.get("/openapi.json").json(), keys_path=keys.path, **scoped)


def documented_errors(spec: dict) -> set[tuple[str, str, int]]:
    return {(method.upper(), path, int(code))
            for path, operations in spec["paths"].items()
            for method, operation in operations.items()
            for code in operation["responses"] if int(code) >= 400}


def test_the_table_covers_exactly_the_documented_error_codes(service):
    documented = documented_errors(service.spec)
    assert not documented - set(PROVOKE), f"documented codes with no request in PROVOKE: {sorted(documented - set(PROVOKE))}"
    assert not set(PROVOKE) - documented, f"PROVOKE entries the document does not list: {sorted(set(PROVOKE) - documented)}"


@pytest.mark.parametrize("entry", sorted(PROVOKE), ids=lambda e: f"{e[0]} {e[1]} {e[2]}")
def test_each_documented_error_code_occurs(service, entry, monkeypatch):
    method, path, code = entry
    ctx = SimpleNamespace(**vars(service), monkeypatch=monkeypatch)
    response = PROVOKE[entry](ctx, (method, path))
    assert response.status_code == code, (entry, response.status_code, response.text[:300])
    if path == "/readyz":
        assert response.json()["status"] == "unavailable"
    else:
        error_of(response)


def test_a_405_lists_every_method_of_the_path(service):
    """Regression (found by the fuzz): GET and POST /v1/collections are two routes, and the 405 for a
    third method named only the first one's (and the error handler dropped the header entirely)."""
    response = service.client.request("PATCH", "/v1/collections", headers={"X-API-Key": KEY})
    assert response.status_code == 405
    assert set(response.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    assert error_of(response)["code"] == "method_not_allowed"


def test_a_body_that_is_not_text_is_a_bad_request(service):
    """Regression (found by the fuzz): FastAPI's own 400 for an unparsable body had code http_error."""
    response = service.client.post("/v1/collections", content=BAD_UTF8, headers={"X-API-Key": KEY, "content-type": "application/json"})
    assert response.status_code == 400
    assert error_of(response)["code"] == "bad_request"
