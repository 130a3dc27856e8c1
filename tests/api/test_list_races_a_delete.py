"""GET /v1/collections while another API process deletes a collection (found by the cluster fuzz: a 404,
which the route does not document, when the delete landed between taking the names and reading one)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.main import create_app
from app.storage.postgres import PostgresCatalog
from app.usecases import follower
from tests.conftest import make_settings


def test_a_collection_deleted_elsewhere_mid_listing_is_left_out(tmp_path, pg_url, monkeypatch):
    monkeypatch.setattr(follower, "POLL_S", 3600.0)  # the follower would otherwise drop it first, within a second
    with TestClient(create_app(make_settings(tmp_path, catalog_url=pg_url))) as client:
        for name in ("a", "b"):
            assert client.post("/v1/collections", json={"name": name, "modality": "audio"}).status_code == 201
        PostgresCatalog(pg_url).delete_collection("a")  # as another API process sharing the catalog would
        listed = client.get("/v1/collections")
        assert listed.status_code == 200, listed.text
        assert [c["name"] for c in listed.json()["data"]] == ["b"]
        assert client.get("/v1/collections/a").status_code == 404
