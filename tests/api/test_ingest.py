import base64
import json

import numpy as np

from tests.conftest import error_of, png_bytes, tone_wav, wave_bytes


def _audio(client, name="a", **options):
    assert client.post("/v1/collections", json={"name": name, "modality": "audio", **options}).status_code == 201


def test_multipart_ingest_with_ids_and_metadata(client):
    _audio(client)
    files = [("files", ("one.wav", tone_wav(300))), ("files", ("two.flac", tone_wav(900, fmt="FLAC")))]
    response = client.post(
        "/v1/collections/a/items",
        files=files,
        data={"ids": "first,second", "metadata": json.dumps([{"kind": "low"}, {"kind": "high"}])},
    )
    assert response.status_code == 200, response.text
    assert [r["id"] for r in response.json()["indexed"]] == ["first", "second"]
    item = client.get("/v1/collections/a/items/second").json()
    assert item["metadata"] == {"kind": "high"} and item["filename"] == "two.flac"
    assert abs(item["duration_s"] - 1.0) < 0.01
    stats = client.get("/v1/collections/a").json()
    assert stats["items"] == 2 and stats["segments"] == stats["indexed_segments"] == 2


def test_default_id_is_the_file_name_and_json_base64_ingest(client):
    _audio(client)
    client.post("/v1/collections/a/items", files=[("files", ("clip.wav", tone_wav()))])
    assert client.get("/v1/collections/a/items/clip.wav").status_code == 200
    body = {"items": [{"id": "b64", "content_base64": base64.b64encode(tone_wav(500)).decode(), "metadata": {"x": 1}}]}
    response = client.post("/v1/collections/a/items", json=body)
    assert response.status_code == 200, response.text
    assert client.get("/v1/collections/a/items/b64").json()["metadata"] == {"x": 1}


def test_long_audio_is_cut_into_windows_with_times(client):
    _audio(client, window_s=1.0, hop_s=0.5)
    client.post("/v1/collections/a/items", files=[("files", ("long.wav", tone_wav(440, seconds=3.2)))])
    # windows start every 0.5 s while a full window fits (0..2.0), plus one aligned to the end (2.2)
    assert client.get("/v1/collections/a/items/long.wav").json()["segments"] == 6


def test_upsert_replaces_the_item(client):
    _audio(client)
    client.post("/v1/collections/a/items", files=[("files", ("x.wav", tone_wav(440, seconds=3)))], data={"ids": "x"})
    client.post("/v1/collections/a/items", files=[("files", ("x.wav", tone_wav(440, seconds=1)))], data={"ids": "x", "metadata": '[{"v": 2}]'})
    stats = client.get("/v1/collections/a").json()
    assert stats["items"] == 1 and stats["segments"] == 1 and stats["indexed_segments"] == 1
    assert client.get("/v1/collections/a/items/x").json()["metadata"] == {"v": 2}


def test_list_get_delete_items_and_media(client):
    _audio(client)
    originals = {f"c{i}.wav": tone_wav(200 + 100 * i) for i in range(5)}
    client.post("/v1/collections/a/items", files=[("files", (n, b)) for n, b in originals.items()])
    page = client.get("/v1/collections/a/items", params={"limit": 2, "offset": 1}).json()
    assert [i["id"] for i in page["data"]] == ["c1.wav", "c2.wav"] and page["count"] == 5
    media = client.get("/v1/collections/a/items/c3.wav/media")
    assert media.status_code == 200 and media.content == originals["c3.wav"]
    assert client.delete("/v1/collections/a/items/c3.wav").status_code == 204
    assert client.get("/v1/collections/a/items/c3.wav").status_code == 404
    assert client.delete("/v1/collections/a/items/c3.wav").status_code == 404
    assert client.get("/v1/collections/a").json()["indexed_segments"] == 4


def test_media_not_kept_when_collection_says_so(client):
    _audio(client, keep_media=False)
    client.post("/v1/collections/a/items", files=[("files", ("x.wav", tone_wav()))])
    response = client.get("/v1/collections/a/items/x.wav/media")
    assert response.status_code == 404 and "keep_media" in error_of(response)["message"]


def test_image_ingest(client):
    client.post("/v1/collections", json={"name": "img", "modality": "image"})
    response = client.post("/v1/collections/img/items", files=[("files", ("red.png", png_bytes((255, 0, 0))))])
    assert response.status_code == 200, response.text
    item = client.get("/v1/collections/img/items/red.png").json()
    assert (item["width"], item["height"]) == (64, 48)


def test_batch_keeps_good_files_and_names_bad_ones(client):
    _audio(client)
    files = [("files", ("good.wav", tone_wav())), ("files", ("bad.wav", b"RIFF....not really")), ("files", ("empty.wav", b""))]
    response = client.post("/v1/collections/a/items", files=files)
    assert response.status_code == 200
    body = response.json()
    assert [r["id"] for r in body["indexed"]] == ["good.wav"]
    assert sorted(e["file"] for e in body["errors"]) == ["bad.wav", "empty.wav"]
    assert client.get("/v1/collections/a").json()["items"] == 1


def test_silence_is_indexed(client):
    _audio(client)
    response = client.post("/v1/collections/a/items", files=[("files", ("quiet.wav", wave_bytes(np.zeros(16000))))])
    assert response.status_code == 200, response.text


def test_ids_with_slashes_and_spaces_work_everywhere(client):
    _audio(client)
    data = tone_wav(700)
    client.post("/v1/collections/a/items", files=[("files", ("x.wav", data))], data={"ids": "sub dir/x.wav"})
    assert client.get("/v1/collections/a/items/sub dir/x.wav").json()["id"] == "sub dir/x.wav"
    assert client.get("/v1/collections/a/items/sub dir/x.wav/media").content == data
    assert client.delete("/v1/collections/a/items/sub dir/x.wav").status_code == 204
    assert client.get("/v1/collections/a").json()["items"] == 0


def test_silent_windows_are_not_indexed(client):
    """A 1 s tone then 2 s of digital silence: only the two windows that hear the tone are indexed;
    a file of pure silence still becomes an item with one segment."""
    _audio(client, window_s=1.0, hop_s=0.5)
    wave = np.concatenate([0.3 * np.sin(2 * np.pi * 440 * np.arange(16000) / 16000), np.zeros(32000)])
    files = [("files", ("padded.wav", wave_bytes(wave))), ("files", ("silence.wav", wave_bytes(np.zeros(24000))))]
    assert client.post("/v1/collections/a/items", files=files).status_code == 200
    assert client.get("/v1/collections/a/items/padded.wav").json()["segments"] == 2
    assert client.get("/v1/collections/a/items/silence.wav").json()["segments"] == 1
    hits = client.post("/v1/collections/a/search", files={"file": ("q.wav", wave_bytes(wave))}, data={"mode": "float"}).json()["results"]
    assert hits[0]["id"] == "padded.wav" and all(s["start"] < 1.0 for s in hits[0]["segments"])
