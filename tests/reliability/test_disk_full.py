"""A full or read-only data directory, injected at the real write paths (runs everywhere): ingest answers
507 / 503 with the reason, leaves nothing half-written (catalog rows, index entries, media files, snapshot
temporaries), search goes on, and ingest works again once space is back, without a restart. Also the
PostgreSQL catalog's own disk_full and read-only errors. test_disk_full_real.py does it on real filesystems.
"""

from __future__ import annotations

import errno
import time

import pytest
from fastapi.testclient import TestClient

from app.index import _snapshot
from app.main import create_app
from app.storage import media_store
from app.usecases import judging
from tests.conftest import error_of, make_settings
from tests.reliability.disk_faults import FailingOs, FullDb, wav, ingest, state, top_hit


@pytest.fixture
def service(tmp_path):
    settings = make_settings(tmp_path, index={"snapshot_every": 1})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert ingest(client, "au", ["a0", "a1", "a2"]).status_code == 200
        yield client, settings.data_dir


@pytest.mark.parametrize("err, status, code, reason", [
    (errno.ENOSPC, 507, "insufficient_storage", "disk_full"),
    (errno.EDQUOT, 507, "insufficient_storage", "disk_full"),
    (errno.EROFS, 503, "storage_read_only", "read_only"),
])
def test_a_media_write_that_fails_stores_nothing_and_says_why(service, monkeypatch, err, status, code, reason):
    client, data_dir = service
    before = state(client, data_dir, "au")
    monkeypatch.setattr(media_store, "os", FailingOs(err))
    response = ingest(client, "au", ["b0", "b1", "a1"], start=10)  # two new, one replacement
    assert response.status_code == status, response.text
    body = error_of(response)
    assert body["code"] == code and body["details"] == {"reason": reason}
    assert state(client, data_dir, "au") == before  # no row, no index entry, no partial file
    assert top_hit(client, "au", 0) == "a0"
    monkeypatch.undo()
    assert ingest(client, "au", ["b0"], start=10).status_code == 200  # no restart needed
    assert top_hit(client, "au", 10) == "b0"


def test_a_commit_refused_by_a_full_catalog_removes_the_stored_originals(service, monkeypatch):
    client, data_dir = service
    catalog = client.app_state["services"].catalog
    before = state(client, data_dir, "au")
    monkeypatch.setattr(catalog, "_db", FullDb(catalog._db))
    response = ingest(client, "au", ["c0", "c1"], start=20)
    assert response.status_code == 507, response.text
    assert error_of(response)["code"] == "insufficient_storage"
    monkeypatch.undo()
    assert state(client, data_dir, "au") == before  # the originals written before the commit are gone again
    assert ingest(client, "au", ["c0", "c1"], start=20).status_code == 200
    assert top_hit(client, "au", 21) == "c1"


def test_a_read_only_catalog_answers_503_and_a_delete_changes_nothing(service, monkeypatch):
    client, data_dir = service
    catalog = client.app_state["services"].catalog
    before = state(client, data_dir, "au")
    monkeypatch.setattr(catalog, "_db", FullDb(catalog._db, "attempt to write a readonly database"))
    response = client.delete("/v1/collections/au/items/a1")
    assert response.status_code == 503 and error_of(response)["code"] == "storage_read_only"
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", wav(30)))])
    assert job.status_code == 503, job.text  # the job is refused before its 202: nothing was accepted
    monkeypatch.undo()
    assert state(client, data_dir, "au") == before
    assert client.delete("/v1/collections/au/items/a1").status_code == 204


def test_a_snapshot_that_cannot_be_written_does_not_fail_a_committed_ingest(service, monkeypatch):
    client, data_dir = service
    real_open = open

    class HalfWritten:
        """A snapshot file the disk fills up under: the first bytes land, then ENOSPC."""

        def __init__(self, handle) -> None:
            self.handle = handle

        def write(self, data) -> int:
            self.handle.write(bytes(data)[:16])
            self.handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.handle.close()

        def __getattr__(self, name: str):
            return getattr(self.handle, name)

    def full_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return HalfWritten(handle) if "w" in mode else handle

    monkeypatch.setattr(_snapshot, "open", full_open, raising=False)  # snapshot_every=1: every commit tries
    response = ingest(client, "au", ["d0"], start=40)
    assert response.status_code == 200, response.text  # committed, hence acknowledged
    assert top_hit(client, "au", 40) == "d0"
    assert state(client, data_dir, "au")["temporaries"] == []


def test_a_background_job_that_meets_a_full_disk_fails_with_the_reason_and_the_next_one_runs(service, monkeypatch):
    client, data_dir = service
    before = state(client, data_dir, "au")
    monkeypatch.setattr(media_store, "os", FailingOs(errno.ENOSPC))
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", wav(50)))], data={"ids": "j0"})
    assert job.status_code == 202, job.text
    failed = _wait_for_job(client, job.json()["id"])
    assert failed["status"] == "failed" and "no space left" in failed["error"]
    assert state(client, data_dir, "au") == before
    monkeypatch.undo()
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", wav(50)))], data={"ids": "j0"})
    assert _wait_for_job(client, job.json()["id"])["status"] == "completed"
    assert top_hit(client, "au", 50) == "j0"


def _wait_for_job(client, job_id: str) -> dict:
    for _ in range(600):
        body = client.get(f"/v1/jobs/{job_id}").json()
        if body["status"] in ("completed", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {body}")


def test_a_postgres_catalog_that_is_full_or_read_only(tmp_path, pg_url):
    """Cluster mode's catalog: PostgreSQL's own disk_full (raised by the server, from a trigger) answers 507 and
    a read-only server (default_transaction_read_only) 503; nothing is kept, search goes on, and both clear
    without a restart."""
    import psycopg

    settings = make_settings(tmp_path, catalog_url=pg_url)
    with TestClient(create_app(settings)) as client, psycopg.connect(pg_url, autocommit=True) as admin:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert ingest(client, "au", ["a0", "a1"]).status_code == 200
        before = state(client, settings.data_dir, "au")
        admin.execute("CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$")
        admin.execute("CREATE TRIGGER full_disk BEFORE INSERT ON segments EXECUTE FUNCTION full_disk()")
        response = ingest(client, "au", ["b0", "a0"], start=10)
        assert response.status_code == 507, response.text
        assert error_of(response)["details"] == {"reason": "disk_full"}
        assert state(client, settings.data_dir, "au") == before  # the originals stored for it are gone again
        assert top_hit(client, "au", 1) == "a1"
        admin.execute("DROP TRIGGER full_disk ON segments")

        catalog = client.app_state["services"].catalog
        catalog._db.execute("SET default_transaction_read_only = on")
        response = ingest(client, "au", ["b0"], start=10)
        assert response.status_code == 503 and error_of(response)["details"] == {"reason": "read_only"}
        assert state(client, settings.data_dir, "au") == before
        catalog._db.execute("SET default_transaction_read_only = off")
        assert ingest(client, "au", ["b0"], start=10).status_code == 200
        assert top_hit(client, "au", 10) == "b0"


def test_a_judgment_on_a_full_disk_leaves_no_torn_line(service, monkeypatch):
    client, data_dir = service
    qrels = data_dir / "judgments" / "au.qrels"
    assert client.post("/v1/collections/au/judgments", json={"qid": "q1", "doc": "a0", "grade": 2}).status_code == 200
    before = qrels.read_bytes()

    real_write = judging.os.write

    def half_write(fd, data):  # the disk fills up mid-line: a few bytes land, then ENOSPC
        real_write(fd, bytes(data)[:3])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(judging, "os", FailingOs(errno.ENOSPC))
    monkeypatch.setattr(judging.os, "write", half_write)
    response = client.post("/v1/collections/au/judgments", json={"qid": "q1", "doc": "a1", "grade": 1})
    assert response.status_code == 507 and error_of(response)["code"] == "insufficient_storage"
    response = client.post("/v1/collections/au/judgments/runs", json={"qid": "q2", "runs": {"x": [{"id": "a1", "score": 1}]}})
    assert response.status_code == 507
    monkeypatch.undo()
    assert qrels.read_bytes() == before
    assert not list((data_dir / "judgments").rglob("*.tmp"))
    assert client.post("/v1/collections/au/judgments", json={"qid": "q1", "doc": "a1", "grade": 1}).status_code == 200
    rows = client.get("/v1/collections/au/judgments").json()["data"]
    assert {(r["doc"], r["grade"]) for r in rows} == {("a0", 2), ("a1", 1)}
