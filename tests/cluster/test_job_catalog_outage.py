"""A background ingest job that meets a PostgreSQL outage is retried, not ended as 'failed'.

``catalog_unavailable`` (app/storage/postgres.py) says nothing about the job: nothing of the chunk in
flight was acknowledged, and redoing committed chunks is an upsert. The runner gives the job back
(or lets its lease lapse while the catalog is still away) and claims it again after a backoff
(app/usecases/jobs.py). Two faults: one injected into the catalog in-process (the commit raises the
error twice), and a real PostgreSQL fast shutdown while the job is encoding.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.storage.postgres import CatalogUnavailable
from tests.cluster.pg_server import PgServer, available
from tests.conftest import make_settings, tone_wav

FILES = [("files", (f"f{i}.wav", tone_wav(250 + 60 * i))) for i in range(5)]


def _finished(client, job_id: str, timeout: float = 90.0) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            job = client.get(f"/v1/jobs/{job_id}").json()
        except Exception:  # noqa: BLE001 - the catalog may still be coming back
            job = {"status": "?"}
        if job.get("status") in ("completed", "failed"):
            return job
        time.sleep(0.1)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_a_job_whose_commit_meets_catalog_unavailable_is_retried_and_completes(tmp_path, pg_url):
    settings = make_settings(tmp_path, catalog_url=pg_url, cluster={"job_lease_s": 2.0})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        catalog = client.app_state["services"].catalog
        original, calls = catalog.upsert_items, []

        def flaky(*args, **kwargs):  # the first two commits find PostgreSQL gone
            calls.append(1)
            if len(calls) <= 2:
                raise CatalogUnavailable(psycopg.OperationalError("connection refused (injected)"))
            return original(*args, **kwargs)

        catalog.upsert_items = flaky
        accepted = client.post("/v1/collections/au/items?wait=false", files=FILES)
        assert accepted.status_code == 202
        job = _finished(client, accepted.json()["id"])
        assert job["status"] == "completed" and job["indexed"] == 5 and job["errors"] == [], job
        assert len(calls) == 3  # two refused commits, then the one that stored the batch
        assert client.get("/v1/collections/au").json()["items"] == 5


def test_a_job_that_is_not_transient_still_fails(tmp_path, pg_url):
    settings = make_settings(tmp_path, catalog_url=pg_url)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        catalog = client.app_state["services"].catalog

        def broken(*args, **kwargs):
            raise RuntimeError("a bug, not an outage")

        catalog.upsert_items = broken
        job = _finished(client, client.post("/v1/collections/au/items?wait=false", files=FILES).json()["id"])
        assert job["status"] == "failed" and "a bug" in job["error"]


@pytest.mark.slow
def test_a_job_running_across_a_real_postgresql_restart_completes(tmp_path):
    if not available():
        pytest.skip("PostgreSQL binaries not usable")
    server = PgServer().start()
    release = threading.Event()
    try:
        settings = make_settings(tmp_path, catalog_url=server.admin_url, cluster={"job_lease_s": 2.0})
        with TestClient(create_app(settings)) as client:
            assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
            encoder = client.app_state["services"].encoders.encoders["audio-baseline"]
            original = encoder.encode

            def held(batch):  # the job encodes until PostgreSQL is down, then commits into the outage
                release.wait(30)
                return original(batch)

            encoder.encode = held
            job_id = client.post("/v1/collections/au/items?wait=false", files=FILES).json()["id"]
            time.sleep(0.5)  # claimed and encoding
            server.shut_down("fast")
            release.set()
            time.sleep(1.5)  # the commit, the give-back and a retry all meet the outage
            server.start_again()
            job = _finished(client, job_id)
            assert job["status"] == "completed" and job["indexed"] == 5, job
            assert client.get("/v1/collections/au").json()["items"] == 5
    finally:
        release.set()
        server.stop()
