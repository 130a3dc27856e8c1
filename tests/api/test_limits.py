"""The limits that are settings: each answers its 4xx in the one error shape, changes nothing, and is in the README table."""

from __future__ import annotations

import base64
import re
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import LimitSettings
from tests.conftest import error_of, make_settings, png_bytes, tone_wav

README = Path(__file__).resolve().parents[2] / "README.md"


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    settings = make_settings(tmp_path_factory.mktemp("limits"), limits={
        "max_files": 2, "max_text_chars": 10, "max_page_size": 5, "max_pending_jobs": 1, "sync_ingest_files": 16})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert client.post("/v1/collections", json={"name": "im", "modality": "image"}).status_code == 201
        yield client


def _count(client, name: str) -> int:
    return client.get(f"/v1/collections/{name}").json()["items"]


def test_more_files_than_max_files_is_422_and_stores_nothing(small):
    three = [("files", (f"t{n}.wav", tone_wav(300 + 100 * n))) for n in range(3)]
    refused = small.post("/v1/collections/au/items", files=three)
    assert refused.status_code == 422 and "max_files" in error_of(refused)["message"]
    items = [{"id": f"j{n}", "content_base64": base64.b64encode(tone_wav(300 + 100 * n)).decode()} for n in range(3)]
    refused = small.post("/v1/collections/au/items", json={"items": items})
    assert refused.status_code == 422 and error_of(refused)["details"] == {"files": 3, "max_files": 2}
    assert _count(small, "au") == 0
    assert small.post("/v1/collections/au/items", files=three[:2]).status_code == 200  # at the limit: accepted
    assert _count(small, "au") == 2


def test_a_text_longer_than_max_text_chars_is_422(small):
    small.post("/v1/collections/im/items", files=[("files", ("red.png", png_bytes((200, 0, 0))))], data={"ids": "red"})
    refused = small.post("/v1/collections/im/search", json={"text": "x" * 11})
    assert refused.status_code == 422 and "max_text_chars" in error_of(refused)["message"]
    at_limit = small.post("/v1/collections/im/search", json={"text": "red circle"})  # 10 characters
    assert at_limit.status_code != 422 or "max_text_chars" not in error_of(at_limit)["message"]


def test_a_page_larger_than_max_page_size_is_422(small):
    refused = small.get("/v1/collections/au/items", params={"limit": 6})
    assert refused.status_code == 422 and "max_page_size" in error_of(refused)["message"]
    assert small.get("/v1/collections/au/items", params={"limit": 5}).status_code == 200


def test_past_max_pending_jobs_an_ingest_job_gets_429_with_retry_after(small):
    services = small.app_state["services"]
    encoder = services.encoders.encoders["audio-baseline"]
    release = threading.Event()
    original = encoder.encode

    def held(batch):  # the first job stays running until the test lets it go
        release.wait(30)
        return original(batch)

    encoder.encode = held
    try:
        first = small.post("/v1/collections/au/items?wait=false", files=[("files", ("p.wav", tone_wav(900)))])
        assert first.status_code == 202
        refused = small.post("/v1/collections/au/items?wait=false", files=[("files", ("q.wav", tone_wav(950)))])
        assert refused.status_code == 429
        body = error_of(refused)
        assert body["code"] == "overloaded" and "max_pending_jobs" in body["message"]
        assert int(refused.headers["retry-after"]) >= 1
    finally:
        release.set()
        encoder.encode = original
    job = first.json()["id"]
    for _ in range(300):  # the released job finishes; then there is room again
        if small.get(f"/v1/jobs/{job}").json()["status"] in ("completed", "failed"):
            break
        time.sleep(0.1)
    assert small.get(f"/v1/jobs/{job}").json()["status"] == "completed"
    again = small.post("/v1/collections/au/items?wait=false", files=[("files", ("q.wav", tone_wav(950)))])
    assert again.status_code == 202


def test_every_limit_setting_is_in_the_readme_limits_table():
    text = README.read_text()
    section = text[text.index("## Limits"):]
    section = section[: section.index("\n## ", 4)]
    names = set(re.findall(r"`RECALL_LIMITS__([A-Z_]+)`", section))
    assert {n.upper() for n in LimitSettings.model_fields} <= names, "a limit setting without a README row"
