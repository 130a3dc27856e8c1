"""Demo seeding: the shipped real media, that search finds real matches in it, and when it stays away."""

from __future__ import annotations

import json
from typing import Any

import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from PIL import Image

from app.main import create_app
from app.usecases import demo_data
from app.usecases.demo import AUDIO_COLLECTION, IMAGE_COLLECTION, WORDS_COLLECTION
from tests.conftest import error_of, make_settings

MANIFEST = [json.loads(line) for line in (demo_data.DEMO_DIR / demo_data.MANIFEST).read_text().splitlines()]
REDISTRIBUTABLE = {"CC BY 4.0", "CC BY-SA 4.0", "CC BY 3.0", "CC BY 2.0", "CC BY-SA 2.0"}


@pytest.fixture(scope="module")
def demo_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    settings = make_settings(tmp_path_factory.mktemp("demo"), demo=True)
    with TestClient(create_app(settings)) as client:
        yield client


def _search(client: TestClient, collection: str, **body: Any) -> list[dict[str, Any]]:
    response = client.post(f"/v1/collections/{collection}/search", json={"mode": "two_stage", **body})
    assert response.status_code == 200, response.text
    return response.json()["results"]


def _overlaps(segment: dict[str, float], span: dict[str, Any]) -> bool:
    return segment["start"] < span["end"] and span["start"] < segment["end"]


def test_shipped_media_is_small_credited_redistributable_and_decodable() -> None:
    files = [demo_data.DEMO_DIR / row["file"] for row in MANIFEST]
    assert sum(f.stat().st_size for f in files) < 4_000_000  # "a few MB" in the repository
    attribution = (demo_data.DEMO_DIR / "ATTRIBUTION.md").read_text()
    for row, path in zip(MANIFEST, files):
        assert row["metadata"]["licence"] in REDISTRIBUTABLE, row
        assert f"`{row['file']}`" in attribution and row["metadata"]["credit"]
        if path.suffix == ".jpg":
            with Image.open(path) as image:
                assert max(image.size) <= 256
        else:
            info = sf.info(path)
            assert info.samplerate == demo_data.RATE and info.channels == 1
    speakers = {row["metadata"]["speaker"] for row in MANIFEST if "word" in row["metadata"]}
    assert len(speakers) == 9  # five Arabic and four English voices
    assert len(list((demo_data.DEMO_DIR / "LICENSES").iterdir())) == 3


def test_first_start_seeds_three_collections_with_the_trained_encoders(demo_client: TestClient) -> None:
    collections = {c["name"]: c for c in demo_client.get("/v1/collections").json()["data"]}
    assert set(collections) == {WORDS_COLLECTION, AUDIO_COLLECTION, IMAGE_COLLECTION}
    expected = {key: sum(row["collection"] == key for row in MANIFEST) for key in ("words", "sounds", "photos")}
    words, sounds, images = collections[WORDS_COLLECTION], collections[AUDIO_COLLECTION], collections[IMAGE_COLLECTION]
    assert (words["items"], sounds["items"], images["items"]) == (expected["words"], expected["sounds"], expected["photos"])
    assert (words["encoder"], sounds["encoder"], images["encoder"]) == ("speech-attn-hash", "sounds-texture", "image-text-minilm")
    assert sounds["indexed_segments"] == sounds["segments"] > sounds["items"]  # 5 s clips, 2 s windows
    item = demo_client.get(f"/v1/collections/{IMAGE_COLLECTION}/items", params={"limit": 1}).json()["data"][0]
    assert item["metadata"]["caption"] and item["metadata"]["licence"] in REDISTRIBUTABLE and item["has_media"]


@pytest.mark.parametrize("word", demo_data.ASC_WORDS)
def test_a_word_finds_the_same_word_said_by_another_speaker(demo_client: TestClient, word: str) -> None:
    # speakers the encoder never heard in training; the long recordings also contain these words
    for speaker in (1, 3):
        results = _search(demo_client, WORDS_COLLECTION, item_id=f"{word}-s{speaker}", k=5)
        clips = [r for r in results if not r["id"].startswith("recording-")]
        assert clips and clips[0]["metadata"]["word"] == word, (word, speaker, [r["id"] for r in results])


def test_an_english_digit_finds_other_speakers_saying_it(demo_client: TestClient) -> None:
    for speaker in demo_data.FSDD_SPEAKERS:
        results = _search(demo_client, WORDS_COLLECTION, item_id=f"digit-9-{speaker}", k=3)
        assert sum(r["id"].startswith("digit-9-") for r in results) >= 2, [r["id"] for r in results]


def test_a_sound_finds_other_recordings_of_its_kind(demo_client: TestClient) -> None:
    for take in (1, 2, 3):  # distinct enough to come first every time
        assert _search(demo_client, AUDIO_COLLECTION, item_id=f"crackling-fire-{take}", k=1)[0]["id"].startswith("crackling-fire")
    for take in (1, 2, 3):
        # a crying baby and a barking dog are both vocalisations: the other takes come first or second
        # (by the mean rule, crying-baby-1 finds dog-3, then crying-baby-3; by the nearest pair the other way round)
        found = [r["id"] for r in _search(demo_client, AUDIO_COLLECTION, item_id=f"crying-baby-{take}", k=3)]
        assert sum(i.startswith("crying-baby") for i in found) == 2, found
    for kind in ("dog", "rain", "clock-tick", "helicopter"):  # the weaker kinds: one other take in the top 4
        found = [r["id"] for r in _search(demo_client, AUDIO_COLLECTION, item_id=f"{kind}-1", k=4)]
        assert any(i.startswith(kind) for i in found), (kind, found)


def test_recordings_list_both_occurrences_of_a_word_said_by_another_speaker(demo_client: TestClient) -> None:
    items = demo_client.get(f"/v1/collections/{WORDS_COLLECTION}/items", params={"limit": 200}).json()["data"]
    recordings = [i for i in items if i["metadata"].get("occurrences")]
    assert len(recordings) == len(demo_data.RECORDINGS)
    for recording in recordings:
        words = [o["word"] for o in recording["metadata"]["occurrences"]]
        repeated = max(set(words), key=words.count)
        spans = [o for o in recording["metadata"]["occurrences"] if o["word"] == repeated]
        assert len(spans) == 2
        query_speaker = 2 if recording["metadata"]["speaker"] != "asc-2" else 4
        results = _search(demo_client, WORDS_COLLECTION, item_id=f"{repeated}-s{query_speaker}", k=10, segments_per_item=3)
        hit = next(r for r in results if r["id"] == recording["id"])
        covered = [next((n for n, span in enumerate(spans) if _overlaps(seg, span)), None) for seg in hit["segments"][:2]]
        assert sorted(c for c in covered if c is not None) == [0, 1], (recording["id"], spans, hit["segments"])


def test_a_sentence_finds_the_photo_it_describes(demo_client: TestClient) -> None:
    # a photo held out of the image-text model's training, described in words of our own
    results = _search(demo_client, IMAGE_COLLECTION, text="horses on a hill by a lake", k=3)
    assert results[0]["id"] == "coco-78499" and results[0]["metadata"]["seen_in_training"] is False


def test_post_demo_adds_only_missing_collections(demo_client: TestClient) -> None:
    assert demo_client.delete(f"/v1/collections/{AUDIO_COLLECTION}").status_code == 204
    body = demo_client.post("/v1/demo").json()
    assert list(body["added"]) == [AUDIO_COLLECTION]
    assert body["added"][AUDIO_COLLECTION] == {"items": sum(r["collection"] == "sounds" for r in MANIFEST), "errors": 0}
    assert demo_client.post("/v1/demo").json()["added"] == {}
    assert demo_client.get("/v1/collections").json()["count"] == 3
    responses = demo_client.get("/openapi.json").json()["paths"]["/v1/demo"]["post"]["responses"]
    assert {"200", "401", "500", "503"} <= set(responses)


def test_encoders_say_what_they_are_for_before_they_are_loaded(demo_client: TestClient) -> None:
    rows = {row["name"]: row for row in demo_client.get("/v1/encoders").json()["data"]}
    assert not rows["sounds-attn-hash"]["loaded"] and "environmental sounds" in rows["sounds-attn-hash"]["description"]
    assert "spoken keywords" in rows["speech-attn-hash"]["description"]
    assert rows["audio-baseline"]["default"] and rows["audio-baseline"]["description"].startswith("training-free")


def test_demo_is_not_seeded_again_or_when_turned_off(tmp_path) -> None:
    settings = make_settings(tmp_path, demo=True)
    with TestClient(create_app(settings)) as client:
        client.delete(f"/v1/collections/{IMAGE_COLLECTION}")
        client.post("/v1/collections", json={"name": "mine", "modality": "image"})
    with TestClient(create_app(settings)) as client:  # a restart with data: nothing is added back
        names = [c["name"] for c in client.get("/v1/collections").json()["data"]]
        assert names == [AUDIO_COLLECTION, WORDS_COLLECTION, "mine"]
    with TestClient(create_app(make_settings(tmp_path / "off", demo=False, api_keys=["k"]))) as client:
        assert client.get("/v1/collections", headers={"X-API-Key": "k"}).json()["count"] == 0
        assert error_of(client.post("/v1/demo"))["code"] == "unauthorized"  # the demo route is behind the key too


def test_missing_demo_media_is_reported_not_fatal(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_data, "DEMO_DIR", tmp_path / "nowhere")
    with TestClient(create_app(make_settings(tmp_path, demo=True))) as client:  # the service still starts
        assert client.get("/v1/collections").json()["count"] == 0
        response = client.post("/v1/demo")
        assert response.status_code == 500 and "demo media is missing" in error_of(response)["message"]
