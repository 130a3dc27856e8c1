"""Demo seeding: what it creates, that search works on it, and when it stays away."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app import demo_data
from app.demo import AUDIO_COLLECTION, IMAGE_COLLECTION
from app.main import create_app
from tests.conftest import make_settings

N_SOUNDS = 8 * 3  # eight kinds, three takes each
N_RECORDINGS = 3
N_SPEECH = len(demo_data.SPEECH_WORDS) * len(demo_data.SPEECH_VOICES) + 1  # words x voices + one sentence


@pytest.fixture(scope="module")
def demo_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = make_settings(tmp_path_factory.mktemp("demo"), demo=True)
    with TestClient(create_app(settings)) as client:
        yield client


def _overlaps(segment: dict[str, float], span: dict[str, Any]) -> bool:
    return segment["start"] < span["end"] and span["start"] < segment["end"]


def test_first_start_seeds_audio_and_image_collections(demo_client: TestClient) -> None:
    collections = {c["name"]: c for c in demo_client.get("/v1/collections").json()["data"]}
    assert set(collections) == {AUDIO_COLLECTION, IMAGE_COLLECTION}
    sounds, images = collections[AUDIO_COLLECTION], collections[IMAGE_COLLECTION]
    assert sounds["modality"] == "audio" and images["modality"] == "image"
    # CI installs espeak-ng, so the speech is part of the demo there
    assert sounds["items"] == N_SOUNDS + N_RECORDINGS + N_SPEECH
    assert images["items"] == 48 and images["segments"] == 48
    assert sounds["indexed_segments"] == sounds["segments"] > sounds["items"]  # long recordings have many windows
    item = demo_client.get(f"/v1/collections/{IMAGE_COLLECTION}/items", params={"limit": 1}).json()["data"][0]
    assert item["metadata"]["caption"] and item["has_media"]


def test_each_demo_sound_finds_its_other_takes(demo_client: TestClient) -> None:
    # the siren and noise kinds are distinct enough for the training-free encoder to rank every
    # other take first; weaker kinds (chirps) are only required to find one take in the top 3
    for kind, needed in (("siren", 2), ("hiss", 2), ("rumble", 2), ("low-tone", 1), ("chirp-up", 1)):
        body = demo_client.post(f"/v1/collections/{AUDIO_COLLECTION}/search", json={"item_id": f"{kind}-1", "k": 3, "mode": "float"}).json()
        found = [r["id"] for r in body["results"] if r["id"].startswith(f"{kind}-")]
        assert len(found) >= needed, (kind, [r["id"] for r in body["results"]])


def test_recordings_list_every_occurrence_at_its_true_time(demo_client: TestClient) -> None:
    items = demo_client.get(f"/v1/collections/{AUDIO_COLLECTION}/items", params={"limit": 100}).json()["data"]
    recordings = [i for i in items if i["metadata"].get("occurrences")]
    assert len(recordings) == N_RECORDINGS + 1  # the generated ones and the spoken sentence
    for recording in recordings:
        occurrences = recording["metadata"]["occurrences"]
        kinds = [o["kind"] for o in occurrences]
        repeated = max(set(kinds), key=kinds.count)
        spans = [o for o in occurrences if o["kind"] == repeated]
        assert len(spans) == 2
        query = "say-recall-en" if repeated == "speech" else f"{repeated}-1"
        body = demo_client.post(
            f"/v1/collections/{AUDIO_COLLECTION}/search", json={"item_id": query, "k": 60, "mode": "float"}
        ).json()
        hit = next(r for r in body["results"] if r["id"] == recording["id"])
        best_two = hit["segments"][:2]
        # each of the two best segments covers a different true occurrence
        covered = [next((n for n, span in enumerate(spans) if _overlaps(seg, span)), None) for seg in best_two]
        assert sorted(c for c in covered if c is not None) == [0, 1], (recording["id"], spans, best_two)


def test_demo_is_not_seeded_again_or_when_turned_off(tmp_path) -> None:
    settings = make_settings(tmp_path, demo=True)
    with TestClient(create_app(settings)) as client:
        client.delete(f"/v1/collections/{IMAGE_COLLECTION}")
        client.post("/v1/collections", json={"name": "mine", "modality": "image"})
    with TestClient(create_app(settings)) as client:  # a restart with data: nothing is added back
        names = [c["name"] for c in client.get("/v1/collections").json()["data"]]
        assert names == [AUDIO_COLLECTION, "mine"]
    with TestClient(create_app(make_settings(tmp_path / "off", demo=False))) as client:
        assert client.get("/v1/collections").json()["count"] == 0


def test_demo_without_espeak_has_no_speech_and_says_why(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(demo_data.shutil, "which", lambda name: None)
    with caplog.at_level(logging.WARNING, logger="app.demo_data"):
        assert demo_data.generated_speech() == []
    assert "espeak-ng is not installed" in caplog.text


def test_generated_media_is_deterministic_and_decodable() -> None:
    first, second = demo_data.generated_sounds(), demo_data.generated_sounds()
    assert [f.data for f in first] == [f.data for f in second]
    assert len({f.filename for f in first}) == N_SOUNDS
    shapes = demo_data._simple_shapes(4, seed=1)  # the fallback when synthetic scenes are absent
    assert all(f.data.startswith(b"\x89PNG") and f.metadata["caption"] for f in shapes)
