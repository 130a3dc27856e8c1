import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.conftest import error_of, make_settings, tone_wav


@pytest.fixture
def keyed(tmp_path):
    with TestClient(create_app(make_settings(tmp_path, api_keys=["k-one", "k-two"]))) as client:
        yield client


def test_v1_routes_need_a_valid_key(keyed):
    missing = keyed.get("/v1/collections")
    assert missing.status_code == 401 and "API key" in error_of(missing)["message"]
    assert keyed.get("/v1/collections", headers={"X-API-Key": "wrong"}).status_code == 401
    assert keyed.get("/v1/collections", headers={"Authorization": "Bearer k-wrong"}).status_code == 401
    assert keyed.get("/v1/collections", headers={"X-API-Key": "k-two"}).status_code == 200
    assert keyed.get("/v1/collections", headers={"Authorization": "Bearer k-one"}).status_code == 200
    # a refused write changes nothing
    assert keyed.post("/v1/collections", json={"name": "a", "modality": "audio"}).status_code == 401
    assert keyed.get("/v1/collections", headers={"X-API-Key": "k-one"}).json()["count"] == 0


@pytest.mark.parametrize("authorization, status", [
    ("Bearer k-wrong", 401),  # a made-up bearer beside a valid X-API-Key (the cluster fuzz's ignored_auth finding)
    ("Bearer k-two", 401),  # two valid but different keys: which one's scopes and rate bucket? refused
    ("Bearer k-one", 200),  # the same key twice is one key
    ("Basic dXNlcjpwYXNz", 200),  # another scheme (a proxy's) is no key
])
def test_two_different_keys_in_one_request_are_refused(keyed, authorization, status):
    response = keyed.get("/v1/collections", headers={"X-API-Key": "k-one", "Authorization": authorization})
    assert response.status_code == status, response.text
    if status == 401:
        assert "two different API keys" in error_of(response)["message"]


def test_health_and_metrics_stay_open(keyed):
    assert keyed.get("/healthz").status_code == 200
    assert keyed.get("/readyz").json()["status"] == "ready"
    assert keyed.get("/metrics").status_code == 200


def test_api_keys_from_a_comma_separated_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("RECALL_API_KEYS", "alpha, beta")
    monkeypatch.setenv("RECALL_BATCHING__MAX_BATCH_SIZE", "7")
    settings = Settings(data_dir=tmp_path)
    assert [k.get_secret_value() for k in settings.api_keys] == ["alpha", "beta"]
    assert settings.batching.max_batch_size == 7
    assert "alpha" not in repr(settings)


def test_readiness_reports_reasons_until_encoders_load(tmp_path):
    settings = make_settings(tmp_path, encoders={"default_audio": "no-such-encoder", "default_image": "image-baseline"})
    with TestClient(create_app(settings)) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert any("no-such-encoder" in reason for reason in response.json()["reasons"])
        assert client.get("/healthz").status_code == 200


def test_metrics_expose_latency_batches_and_sizes(client):
    client.post("/v1/collections", json={"name": "m", "modality": "audio"})
    client.post("/v1/collections/m/items", files=[("files", ("x.wav", tone_wav(seconds=2)))])
    client.post("/v1/collections/m/search", files={"file": ("q.wav", tone_wav())})
    text = client.get("/metrics").text
    assert 'recall_request_seconds_count{method="POST",route="/v1/collections/{name}/search",status="200"} 1.0' in text
    assert 'recall_collection_items{collection="m"} 1.0' in text
    assert 'recall_collection_segments{collection="m"} 3.0' in text
    assert "recall_batch_size_bucket" in text and "recall_queue_depth" in text


def test_background_start_answers_503_until_loaded(tmp_path, monkeypatch):
    import threading

    from app.usecases.services import Services

    release = threading.Event()
    original = Services.start

    async def slow_start(self):
        import asyncio

        await asyncio.to_thread(release.wait, 10)
        await original(self)

    monkeypatch.setattr(Services, "start", slow_start)
    with TestClient(create_app(make_settings(tmp_path, background_start=True))) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503
        response = client.get("/v1/collections")
        assert response.status_code == 503 and "not ready" in error_of(response)["message"]
        assert client.get("/metrics").status_code == 200
        release.set()
        import time

        deadline = time.time() + 10
        while client.get("/readyz").status_code != 200 and time.time() < deadline:
            time.sleep(0.02)
        assert client.get("/v1/collections").status_code == 200


def test_startup_traces_a_trained_default_audio_model_before_the_first_query(tmp_path):
    import asyncio

    from app.usecases.services import Services

    async def started_encoder():
        services = Services(make_settings(tmp_path, encoders={"default_audio": "speech-attn-hash", "default_image": "image-baseline"}))
        await services.start()
        try:
            encoder = services.encoders.encoders["speech-attn-hash"]
            return type(encoder.steps.built).__name__, services.encoders.batchers()
        finally:
            await services.stop()

    traced, batchers = asyncio.run(started_encoder())
    assert traced == "TracedStep"  # built at start-up, not in the first user's query
    assert all(b.stats.batches == 0 for b in batchers)  # the warm-up is not a counted batch
