"""Scoped keys: every route has an access rule, keys are stored hashed, 401 without a key, 403 without the scope."""

from __future__ import annotations

import json

import pytest
from fastapi import APIRouter, Depends
from fastapi.testclient import TestClient

from app.api.auth import PUBLIC, ROUTE_SCOPES, openapi_path
from app.api.deps import require_api_key
from app.cli import main as cli_main
from app.main import create_app
from app.usecases.keys import SCOPES, KeyFile, hash_key
from tests.conftest import error_of, make_settings

PLAIN = "plain-all-scopes"


def operations(spec: dict) -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, ops in spec["paths"].items() for method in ops}


def unguarded(spec: dict) -> set[tuple[str, str]]:
    """Operations of the document with no rule in ROUTE_SCOPES."""
    ruled = {(method, openapi_path(path)) for method, path in ROUTE_SCOPES}
    return operations(spec) - ruled


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("scoped"), api_keys=[PLAIN])
    keys = KeyFile(settings.resolved_keys_file())
    # for each scope: a key holding only it, and a key holding every scope but it
    only = {scope: keys.create(scope, f"only-{scope}")[0] for scope in SCOPES}
    without = {scope: keys.create(set(SCOPES) - {scope}, f"not-{scope}")[0] for scope in SCOPES}
    with TestClient(create_app(settings)) as client:
        yield client, keys, only, without


def test_every_route_of_the_openapi_document_has_an_access_rule(service):
    client = service[0]
    spec = client.app.openapi()
    assert not unguarded(spec), f"routes with no rule in app/api/auth.py ROUTE_SCOPES: {sorted(unguarded(spec))}"
    stale = {(m, openapi_path(p)) for m, p in ROUTE_SCOPES} - operations(spec)
    assert not stale, f"rules for routes that do not exist: {sorted(stale)}"
    # the document tells a client which scope each /v1 operation needs
    for (method, path), scope in ROUTE_SCOPES.items():
        operation = spec["paths"][openapi_path(path)][method.lower()]
        assert operation.get("x-required-scope") == (None if scope == PUBLIC else scope)
        if scope != PUBLIC:
            assert {"403", "429"} <= set(operation["responses"])


def test_a_new_route_without_a_rule_is_caught_by_the_walk_and_refused_at_run_time(tmp_path):
    settings = make_settings(tmp_path, api_keys=[PLAIN])
    app = create_app(settings)
    extra = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])

    @extra.get("/unruled")
    def unruled() -> dict:
        return {"ok": True}

    app.include_router(extra)
    app.openapi_schema = None
    assert unguarded(app.openapi()) == {("GET", "/v1/unruled")}
    with TestClient(app) as client:
        refused = client.get("/v1/unruled", headers={"X-API-Key": PLAIN})  # even a key with every scope
        assert refused.status_code == 403 and "no access rule" in error_of(refused)["message"]


def _path(template: str) -> str:
    # names that do not exist: an admitted request answers 404/422 and changes nothing
    return (openapi_path(template).replace("{name}", "no-such-collection").replace("{item_id}", "no-such-item")
            .replace("{job_id}", "0123456789abcdef").replace("{key_id}", "no-such-key"))


@pytest.mark.parametrize("rule", sorted(ROUTE_SCOPES), ids=lambda r: f"{r[0]} {r[1]}")
def test_each_route_needs_exactly_its_scope(service, rule):
    client, _, only, without = service
    method, template = rule
    scope = ROUTE_SCOPES[rule]
    path = _path(template)
    if scope == PUBLIC:
        assert client.request(method, path).status_code not in (401, 403)
        return
    assert client.request(method, path).status_code == 401
    refused = client.request(method, path, headers={"X-API-Key": without[scope]})
    assert refused.status_code == 403, refused.text
    body = error_of(refused)
    assert body["code"] == "forbidden" and body["details"]["needed"] == [scope]
    for key in (only[scope], PLAIN):
        admitted = client.request(method, path, headers={"Authorization": f"Bearer {key}"}, json={})
        assert admitted.status_code not in (401, 403), (rule, admitted.text)


def test_keys_are_stored_as_their_sha256_only(service):
    _, keys, only, _ = service
    text = keys.path.read_text()
    stored = {row["id"]: row["hash"] for row in json.loads(text)["keys"]}
    for key in only.values():
        secret = key.split("_", 2)[2]
        assert key not in text and secret not in text
        assert stored[key.split("_")[1]] == hash_key(key)
    assert keys.path.stat().st_mode & 0o077 == 0  # owner-only


def test_a_wrong_secret_with_a_real_id_is_refused(service):
    client, _, only, _ = service
    key = only["read"]
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    assert client.get("/v1/collections", headers={"X-API-Key": forged}).status_code == 401
    assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 200


def test_keys_created_and_revoked_with_the_cli_take_effect_without_a_restart(service, capsys):
    client, keys, _, _ = service
    data_dir = str(keys.path.parent)
    assert cli_main(["keys", "create", "--scopes", "read", "--name", "dashboard", "--data-dir", data_dir]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("rk_")
    assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 200
    assert client.post("/v1/collections", json={"name": "x", "modality": "audio"}, headers={"X-API-Key": key}).status_code == 403

    assert cli_main(["keys", "list", "--json", "--data-dir", data_dir]) == 0
    listed = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    ident = key.split("_")[1]
    assert listed[ident]["scopes"] == ["read"] and listed[ident]["name"] == "dashboard" and "hash" not in listed[ident]

    assert cli_main(["keys", "revoke", ident, "--data-dir", data_dir]) == 0
    assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 401
    assert cli_main(["keys", "revoke", ident, "--data-dir", data_dir]) == 1
    assert cli_main(["keys", "create", "--scopes", "read,root", "--data-dir", data_dir]) == 2


def test_a_key_file_alone_turns_keys_on(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        assert client.get("/v1/collections").status_code == 200  # no keys anywhere: open
        key, _ = KeyFile(settings.resolved_keys_file()).create("read,write")
        assert client.get("/v1/collections").status_code == 401
        assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 200


def test_with_keys_off_nobody_can_mint_the_first_key_over_http(tmp_path):
    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        answer = client.post("/v1/keys", json={"scopes": ["admin"]})
        assert answer.status_code == 403 and "recall keys create" in error_of(answer)["message"]
        assert not settings.resolved_keys_file().exists()
        assert client.get("/v1/collections").status_code == 200  # still open, nobody locked out


def test_the_client_raises_forbidden_and_rate_limited():
    import httpx

    import recall

    def response(status: int, code: str) -> httpx.Response:
        return httpx.Response(status, json={"error": {"code": code, "message": "m"}})

    with pytest.raises(recall.Forbidden):
        recall.raise_for_error(response(403, "forbidden"))
    with pytest.raises(recall.RateLimited):
        recall.raise_for_error(response(429, "rate_limited"))
    with pytest.raises(recall.Overloaded) as queue_full:
        recall.raise_for_error(response(429, "overloaded"))
    assert not isinstance(queue_full.value, recall.RateLimited)


def test_an_admin_key_manages_keys_over_http(service):
    client, _, only, _ = service
    admin = {"X-API-Key": only["admin"]}
    created = client.post("/v1/keys", json={"scopes": ["read"], "name": "viewer"}, headers=admin)
    assert created.status_code == 201, created.text
    body = created.json()
    key, ident = body["key"], body["id"]
    assert key.startswith(f"rk_{ident}_") and body["scopes"] == ["read"]
    assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 200
    assert client.get("/v1/keys", headers={"X-API-Key": key}).status_code == 403  # read cannot see keys
    listed = client.get("/v1/keys", headers=admin).json()["data"]
    assert [row for row in listed if row["id"] == ident] == [{k: body[k] for k in ("id", "name", "scopes", "created_at")}]
    assert all("hash" not in row and "key" not in row for row in listed)
    assert client.post("/v1/keys", json={"scopes": ["root"]}, headers=admin).status_code == 422
    assert client.delete(f"/v1/keys/{ident}", headers=admin).status_code == 204
    assert client.get("/v1/collections", headers={"X-API-Key": key}).status_code == 401
    assert client.delete(f"/v1/keys/{ident}", headers=admin).status_code == 404


def test_a_full_disk_refuses_a_new_key_with_507_and_leaves_the_file_as_it_was(service, monkeypatch):
    import errno

    from app.usecases import keys as keys_module
    from tests.reliability.disk_faults import FailingOs

    client, keys, only, _ = service
    before = keys.path.read_bytes()
    monkeypatch.setattr(keys_module, "os", FailingOs(errno.ENOSPC))
    refused = client.post("/v1/keys", json={"scopes": ["read"]}, headers={"X-API-Key": only["admin"]})
    assert refused.status_code == 507 and error_of(refused)["code"] == "insufficient_storage"
    assert keys.path.read_bytes() == before
    assert [p.name for p in keys.path.parent.iterdir() if p.name.startswith("keys.json")] == ["keys.json"]


def test_behind_a_proxy_prefix_the_rules_still_apply(tmp_path):
    """With root_path (a proxy serving the API under /api), rules match the path the router sees."""
    settings = make_settings(tmp_path)
    key, _ = KeyFile(settings.resolved_keys_file()).create("read")
    with TestClient(create_app(settings), root_path="/api") as client:
        assert client.get("/api/v1/collections").status_code == 401
        assert client.get("/api/v1/collections", headers={"X-API-Key": key}).status_code == 200
        assert client.post("/api/v1/collections", json={"name": "x", "modality": "audio"},
                           headers={"X-API-Key": key}).status_code == 403


def test_concurrent_key_changes_are_all_kept(tmp_path):
    """Regression (found by the fuzz, bench/reliability/fuzz.py): two POST /v1/keys at once raced on the file's
    temporary copy (500) or lost one of the new keys. Every create and revoke must land."""
    import multiprocessing
    from concurrent.futures import ThreadPoolExecutor

    path = tmp_path / "keys.json"
    doomed = [KeyFile(path).create("read")[1].id for _ in range(10)]
    keys = KeyFile(path)  # one instance, as the service holds it, shared by its request threads
    with ThreadPoolExecutor(8) as pool:
        created = list(pool.map(lambda n: keys.create("write", f"k{n}")[1].id, range(40)))
        revoked = list(pool.map(keys.revoke, doomed))
    # another process (the CLI beside the service) changing the same file meanwhile is serialised too
    context = multiprocessing.get_context("fork")
    with context.Pool(4) as processes:
        created += processes.map(_create_in_another_process, [(str(path), n) for n in range(8)])
    assert all(revoked)
    stored = KeyFile(path).records()
    assert set(created) == set(stored), (len(created), len(stored))
    assert not set(doomed) & set(stored)
    assert not list(tmp_path.glob("*.tmp"))


def _create_in_another_process(args: tuple[str, int]) -> str:
    from pathlib import Path

    path, n = args
    return KeyFile(Path(path)).create("read", f"p{n}")[1].id
