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
