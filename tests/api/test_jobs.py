import time

from tests.conftest import error_of, tone_wav


def _wait(client, job_id, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("completed", "failed"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def test_wait_false_answers_202_with_a_job_that_reports_progress_and_errors(client):
    client.post("/v1/collections", json={"name": "a", "modality": "audio"})
    files = [("files", (f"f{i}.wav", tone_wav(200 + 50 * i))) for i in range(4)] + [("files", ("broken.wav", b"RIFFxxxx"))]
    response = client.post("/v1/collections/a/items?wait=false", files=files)
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["total"] == 5
    finished = _wait(client, job["id"])
    assert finished["status"] == "completed" and finished["done"] == 5 and finished["indexed"] == 4
    assert [e["file"] for e in finished["errors"]] == ["broken.wav"]
    assert client.get("/v1/collections/a").json()["items"] == 4


def test_large_batches_become_jobs(tmp_path, backend_overrides):
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings

    with TestClient(create_app(make_settings(tmp_path, limits={"sync_ingest_files": 2}, **backend_overrides))) as client:
        client.post("/v1/collections", json={"name": "a", "modality": "audio"})
        files = [("files", (f"f{i}.wav", tone_wav(300 + i))) for i in range(3)]
        response = client.post("/v1/collections/a/items", files=files)
        assert response.status_code == 202
        assert _wait(client, response.json()["id"])["indexed"] == 3


def test_unknown_job_is_404(client):
    assert error_of(client.get("/v1/jobs/nope"))["code"] == "not_found"


def test_jobs_kept_on_disk_by_an_earlier_release_are_imported(tmp_path):
    """Before jobs lived in the catalog they were files under data/jobs/<id>/: an upgrade keeps them."""
    import json

    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings

    settings = make_settings(tmp_path)
    with TestClient(create_app(settings)) as client:
        client.post("/v1/collections", json={"name": "a", "modality": "audio"})
    old = tmp_path / "data" / "jobs"
    pending, done = old / "0123456789abcdef", old / "fedcba9876543210"
    pending.mkdir(parents=True)
    done.mkdir()
    (pending / "0.bin").write_bytes(tone_wav(440.0))
    base = {"collection": "a", "errors": [], "created_at": 1.0, "finished_at": None, "indexed": 0, "done": 0, "total": 1}
    (pending / "state.json").write_text(json.dumps({**base, "id": pending.name, "status": "running",
                                                    "files": [{"path": "0.bin", "filename": "t.wav", "id": "legacy", "metadata": {}}]}))
    (done / "state.json").write_text(json.dumps({**base, "id": done.name, "status": "completed", "finished_at": 2.0,
                                                 "indexed": 3, "done": 3, "total": 3, "files": []}))
    with TestClient(create_app(settings)) as client:
        finished = _wait(client, pending.name)
        assert finished["status"] == "completed" and finished["indexed"] == 1
        assert client.get("/v1/collections/a/items/legacy").status_code == 200
        assert {k: client.get(f"/v1/jobs/{done.name}").json()[k] for k in ("status", "indexed", "total")} == {
            "status": "completed", "indexed": 3, "total": 3}
    assert not old.exists()
