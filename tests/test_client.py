"""The typed clients against the real service over HTTP (uvicorn on a free port, API keys on)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from app import errors
from app.settings import Settings
from recall import AsyncRecallClient, RecallClient, raise_for_error
from tests.conftest import tone_wav
from tests.live_server import live_server

KEY = "client-test-key"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    data_dir = tmp_path_factory.mktemp("client") / "data"
    settings = Settings(
        data_dir=data_dir, api_keys=[KEY],
        encoders={"default_audio": "audio-baseline", "default_image": "image-baseline"},
        limits={"sync_ingest_files": 4},  # so a batch of five becomes a background job
    )
    with live_server(settings) as url:
        yield url, data_dir


@pytest.fixture
def client(service: tuple[str, Path]) -> Iterator[RecallClient]:
    with RecallClient(service[0], api_key=KEY) as c:
        yield c


def _tones(tmp_path: Path) -> list[Path]:
    paths = []
    for freq in (220, 440, 880):
        path = tmp_path / f"tone-{freq}.wav"
        path.write_bytes(tone_wav(freq, seconds=1.5))
        paths.append(path)
    return paths


def test_health_readiness_metrics_and_encoders(client: RecallClient) -> None:
    assert client.health() == {"status": "ok"}
    assert client.ready() is True
    assert client.readiness()["status"] == "ready"
    assert "recall_" in client.metrics()
    names = {e["name"]: e for e in client.list_encoders()}
    assert names["audio-baseline"]["modality"] == "audio" and names["audio-baseline"]["loaded"] is True


def test_collections_items_and_search_round_trip(client: RecallClient, tmp_path: Path) -> None:
    created = client.create_collection("tones", "audio", window_s=1.0, hop_s=0.5)
    assert created["name"] == "tones" and created["items"] == 0 and created["encoder"] == "audio-baseline"
    assert "tones" in [c["name"] for c in client.list_collections()]

    paths = _tones(tmp_path)
    # paths, (filename, bytes) and bare bytes are all accepted
    report = client.ingest(
        "tones", [paths[0], (paths[1].name, paths[1].read_bytes()), paths[2].read_bytes()],
        ids=["low", "mid", "high"], metadata=[{"hz": 220}, {"hz": 440}, {"hz": 880}],
    )
    assert [row["id"] for row in report["indexed"]] == ["low", "mid", "high"] and report["errors"] == []
    assert all(row["segments"] == 2 for row in report["indexed"])  # 1.5 s: windows at 0 and 0.5 s

    assert client.get_collection("tones")["items"] == 3
    item = client.get_item("tones", "mid")
    assert item["metadata"] == {"hz": 440} and item["segments"] == 2 and item["has_media"] is True
    page = client.list_items("tones", limit=2, offset=1)
    assert page["count"] == 3 and len(page["data"]) == 2
    assert client.get_media("tones", "mid") == paths[1].read_bytes()

    hits = client.search_file("tones", paths[1], k=3, mode="float")
    assert hits["mode"] == "float" and hits["results"][0]["id"] == "mid"
    assert hits["results"][0]["segments"][0]["end"] > 0 and "search_ms" in hits["timings"]
    filtered = client.search_file("tones", paths[1].read_bytes(), k=3, filter={"hz": 880})
    assert [r["id"] for r in filtered["results"]] == ["high"]
    by_item = client.search_item("tones", "low", k=5, mode="binary")
    assert "low" not in [r["id"] for r in by_item["results"]] and len(by_item["results"]) == 2

    client.delete_item("tones", "low")
    with pytest.raises(errors.NotFound):
        client.get_item("tones", "low")


def test_json_ingest_jobs_and_ids_with_spaces(client: RecallClient) -> None:
    client.create_collection("jobs", "audio")
    content = base64.b64encode(tone_wav(330)).decode()
    report = client.ingest_base64("jobs", [{"id": "a tone", "content_base64": content, "metadata": {"via": "json"}}])
    assert report["indexed"][0]["id"] == "a tone"
    assert client.get_item("jobs", "a tone")["metadata"] == {"via": "json"}  # the id is quoted in the URL

    files = [(f"t{n}.wav", tone_wav(200 + 100 * n)) for n in range(5)]
    job = client.submit_ingest("jobs", files)
    assert job["status"] in ("queued", "running", "completed") and job["total"] == 5
    done = client.wait_for_job(job["id"])
    assert done["status"] == "completed" and done["indexed"] == 5
    assert client.get_job(job["id"])["done"] == 5
    # five files are over this service's synchronous limit of four: ingest() follows the job
    followed = client.ingest("jobs", [(f"u{n}.wav", tone_wav(250 + 100 * n)) for n in range(5)])
    assert followed["indexed_count"] == 5 and followed["job"]["status"] == "completed"
    assert client.get_collection("jobs")["items"] == 11


def test_judgments_and_comparison_confidence(client: RecallClient) -> None:
    client.create_collection("judged", "audio")
    client.ingest("judged", [(f"{n}.wav", tone_wav(200 + 150 * n)) for n in range(4)], ids=["a", "b", "c", "d"])
    assert client.judging_confidence("judged", k=2)["confidence"] is None  # nothing compared yet
    client.record_runs("judged", "q1", {"binary": [("a", 0.9), ("b", 0.5)], "float": [("c", 0.8), ("a", 0.7)]}, query="test")
    client.record_judgment("judged", "q1", "a", 2, query="test")
    client.record_judgment("judged", "q1", "b", 0)
    client.record_judgment("judged", "q1", "b", 1)  # the later judgment wins
    judged = client.list_judgments("judged", qid="q1")
    assert {(j["doc"], j["grade"]) for j in judged["data"]} == {("a", 2), ("b", 1)}
    # AG@2 over one query: binary = (2 + 1) / 2 = 1.5 exactly; float = (E[c] + 2) / 2 with c unjudged
    # (uniform over 0,1,2: E = 1) = 1.5, so the expected difference is 0 and the sign is a coin flip
    estimate = client.judging_confidence("judged", k=2)
    assert estimate["system_means"] == pytest.approx({"binary": 1.5, "float": 1.5})
    assert estimate["confidence"] == pytest.approx(0.5)
    assert estimate["next"] == [{"qid": "q1", "doc": "c"}]
    client.record_judgment("judged", "q1", "c", 0)
    settled = client.judging_confidence("judged", k=2)
    assert settled["confidence"] == pytest.approx(1.0) and settled["system_means"]["float"] == pytest.approx(1.0)
    with pytest.raises(errors.InvalidInput):
        client.record_judgment("judged", "q1", "a", 3)
    with pytest.raises(errors.NotFound):
        client.record_judgment("judged", "q1", "no-such-item", 1)


def test_errors_come_back_as_service_error_types(service: tuple[str, Path], client: RecallClient, tmp_path: Path) -> None:
    with RecallClient(service[0]) as anonymous, pytest.raises(errors.Unauthorized, match="API key"):
        anonymous.list_collections()
    with RecallClient(service[0], api_key="wrong") as wrong, pytest.raises(errors.Unauthorized):
        wrong.list_collections()
    with pytest.raises(errors.NotFound, match="no collection"):
        client.get_collection("missing")
    client.create_collection("errs", "audio")
    with pytest.raises(errors.Conflict):
        client.create_collection("errs", "audio")
    with pytest.raises(errors.InvalidInput):
        client.search_file("errs", tone_wav(), k=0)
    with pytest.raises(errors.InvalidInput, match="text"):
        client.search_text("errs", "a red circle")
    with pytest.raises(errors.ServiceError) as bad:
        client.ingest("errs", [("notes.wav", b"this is not audio at all")])
    assert bad.value.status_code in (415, 422) and "notes.wav" in bad.value.message
    assert client.get_collection("errs")["items"] == 0  # nothing was stored
    with RecallClient("http://127.0.0.1:9", timeout=2) as nowhere, pytest.raises(errors.Unhealthy, match="cannot reach"):
        nowhere.health()


@pytest.mark.parametrize(
    ("status", "expected"),
    [(400, errors.BadRequest), (401, errors.Unauthorized), (404, errors.NotFound), (409, errors.Conflict),
     (413, errors.PayloadTooLarge), (415, errors.UnsupportedMedia), (422, errors.InvalidInput), (429, errors.Overloaded),
     (503, errors.Unhealthy), (500, errors.BackendError), (405, errors.BadRequest), (502, errors.BackendError)],
)
def test_status_codes_map_to_error_classes(status: int, expected: type[errors.ServiceError]) -> None:
    body = {"error": {"code": "x", "message": "what to fix", "details": [1]}}
    with pytest.raises(expected) as caught:
        raise_for_error(httpx.Response(status, json=body))
    assert type(caught.value) is expected and caught.value.message == "what to fix" and caught.value.details == [1]
    with pytest.raises(expected, match="plain text"):  # a proxy's non-JSON page still maps by status
        raise_for_error(httpx.Response(status, text="plain text"))
    raise_for_error(httpx.Response(200, text=json.dumps({})))  # success raises nothing


def test_async_client_has_the_same_methods(service: tuple[str, Path], tmp_path: Path) -> None:
    sync_methods = {m for m in dir(RecallClient) if not m.startswith("_")} - {"close"}
    async_methods = {m for m in dir(AsyncRecallClient) if not m.startswith("_")} - {"aclose"}
    assert sync_methods == async_methods
    paths = _tones(tmp_path)

    async def scenario() -> None:
        async with AsyncRecallClient(service[0], api_key=KEY) as client:
            assert await client.ready()
            await client.create_collection("async", "audio")
            report = await client.ingest("async", paths, ids=["low", "mid", "high"])
            assert len(report["indexed"]) == 3
            # concurrent searches over one connection pool
            results = await asyncio.gather(*(client.search_file("async", p, k=1, mode="float") for p in paths))
            assert [r["results"][0]["id"] for r in results] == ["low", "mid", "high"]
            assert await client.get_media("async", "high") == paths[2].read_bytes()
            assert (await client.list_items("async"))["count"] == 3
            await client.delete_collection("async")
            with pytest.raises(errors.NotFound):
                await client.get_collection("async")

    asyncio.run(scenario())
