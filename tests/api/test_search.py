import json

import numpy as np

from tests.conftest import png_bytes, tone_wav, wave_bytes

FREQS = {"low": 250, "mid": 700, "high": 2500, "higher": 4500}


def _seed_tones(client, **options):
    client.post("/v1/collections", json={"name": "t", "modality": "audio", **options})
    files = [("files", (f"{name}.wav", tone_wav(freq, seconds=1.0))) for name, freq in FREQS.items()]
    meta = [{"band": "low" if f < 1000 else "high"} for f in FREQS.values()]
    assert client.post("/v1/collections/t/items", files=files, data={"metadata": json.dumps(meta)}).status_code == 200


def test_query_by_example_finds_the_same_sound_first_in_every_mode(client):
    _seed_tones(client)
    for mode in ("binary", "float", "two_stage"):
        response = client.post("/v1/collections/t/search", files={"file": ("q.wav", tone_wav(2500, seconds=0.8))}, data={"k": "3", "mode": mode})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["results"][0]["id"] == "high.wav", (mode, body["results"])
        assert [r["rank"] for r in body["results"]] == [1, 2, 3]
        distances = [r["distance"] for r in body["results"]]
        assert distances == sorted(distances)
        assert {"decode_ms", "encode_ms", "search_ms"} <= set(body["timings"])


def test_scores_follow_the_mode(client):
    _seed_tones(client)
    binary = client.post("/v1/collections/t/search", json={"item_id": "low.wav", "mode": "binary", "k": 3}).json()["results"]
    for row in binary:
        assert row["distance"] == int(row["distance"])  # Hamming
        assert abs(row["score"] - (1 - row["distance"] / 256)) < 1e-9
    floats = client.post("/v1/collections/t/search", json={"item_id": "low.wav", "mode": "float", "k": 3}).json()["results"]
    for row in floats:
        assert abs(row["score"] - (1 - row["distance"])) < 1e-6


def test_query_by_item_excludes_the_item_itself(client):
    _seed_tones(client)
    results = client.post("/v1/collections/t/search", json={"item_id": "mid.wav", "k": 10}).json()["results"]
    ids = [r["id"] for r in results]
    assert "mid.wav" not in ids and len(ids) == 3


def test_metadata_filter_and_max_distance(client):
    _seed_tones(client)
    results = client.post("/v1/collections/t/search", json={"item_id": "low.wav", "filter": {"band": "high"}}).json()["results"]
    assert {r["id"] for r in results} == {"high.wav", "higher.wav"}
    assert all(r["metadata"]["band"] == "high" for r in results)
    nearest = client.post("/v1/collections/t/search", json={"item_id": "low.wav", "mode": "float", "k": 3}).json()["results"]
    cutoff = nearest[0]["distance"]
    limited = client.post("/v1/collections/t/search", json={"item_id": "low.wav", "mode": "float", "max_distance": cutoff}).json()["results"]
    assert [r["id"] for r in limited] == [nearest[0]["id"]]


def test_multipart_filter_field(client):
    _seed_tones(client)
    response = client.post(
        "/v1/collections/t/search",
        files={"file": ("q.wav", tone_wav(250))},
        data={"filter": json.dumps({"band": "high"}), "k": "5"},
    )
    assert response.status_code == 200, response.text
    assert {r["id"] for r in response.json()["results"]} == {"high.wav", "higher.wav"}


def test_search_finds_every_place_a_sound_occurs_in_a_long_recording(client):
    """A 2500 Hz tone at 2-3 s and 7-8 s inside 10 s of low noise: both places come back."""
    client.post("/v1/collections", json={"name": "long", "modality": "audio", "window_s": 1.0, "hop_s": 0.5})
    rate = 16000
    rng = np.random.default_rng(0)
    wave = 0.01 * rng.standard_normal(10 * rate)
    t = np.arange(rate) / rate
    for start in (2, 7):
        wave[start * rate : (start + 1) * rate] = 0.3 * np.sin(2 * np.pi * 2500 * t)
    client.post("/v1/collections/long/items", files=[("files", ("rec.wav", wave_bytes(wave)))])
    client.post("/v1/collections/long/items", files=[("files", ("other.wav", tone_wav(300, seconds=3)))])
    response = client.post("/v1/collections/long/search", files={"file": ("q.wav", tone_wav(2500))}, data={"mode": "float", "segments_per_item": "2"})
    top = response.json()["results"][0]
    assert top["id"] == "rec.wav"
    starts = sorted(s["start"] for s in top["segments"])
    assert starts == [2.0, 7.0], top["segments"]


def test_empty_collection_returns_no_results(client):
    client.post("/v1/collections", json={"name": "empty", "modality": "audio"})
    response = client.post("/v1/collections/empty/search", files={"file": ("q.wav", tone_wav())})
    assert response.status_code == 200 and response.json()["results"] == []


def test_mode_needs_its_index(client):
    client.post("/v1/collections", json={"name": "b", "modality": "audio", "index_kinds": ["binary"]})
    client.post("/v1/collections/b/items", files=[("files", ("x.wav", tone_wav()))])
    assert client.post("/v1/collections/b/search", json={"item_id": "x.wav", "mode": "binary"}).status_code == 200
    response = client.post("/v1/collections/b/search", json={"item_id": "x.wav", "mode": "float"})
    assert response.status_code == 422 and "float" in response.json()["error"]["message"]


def test_image_search_by_example(client):
    client.post("/v1/collections", json={"name": "img", "modality": "image"})
    colours = {"red": (220, 20, 20), "green": (20, 200, 40), "blue": (30, 40, 220)}
    files = [("files", (f"{n}.png", png_bytes(c, stripes=True))) for n, c in colours.items()]
    client.post("/v1/collections/img/items", files=files)
    response = client.post("/v1/collections/img/search", files={"file": ("q.png", png_bytes((30, 45, 215), size=(80, 80), stripes=True))}, data={"mode": "float"})
    assert response.json()["results"][0]["id"] == "blue.png"


def test_multipart_parts_are_closed_after_search_and_ingest(client):
    """Each file part is a spooled temporary file; left open it lingers until garbage collection
    (on disk past 1 MB) and warns then."""
    import gc
    import warnings

    client.post("/v1/collections", json={"name": "closed", "modality": "audio"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ingest = client.post("/v1/collections/closed/items", files=[("files", ("a.wav", tone_wav(440, seconds=1.0)))])
        search = client.post("/v1/collections/closed/search", files={"file": ("q.wav", tone_wav(440, seconds=1.0))}, data={"k": "1"})
        gc.collect()
    assert ingest.status_code == 200 and search.status_code == 200, (ingest.text, search.text)
    assert search.json()["results"][0]["id"] == "a.wav"
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning) and "Unclosed file" in str(w.message)]
    assert unclosed == []


def test_item_distance_rule_is_a_search_parameter(client):
    """A 2-s query (a 250 Hz second, then a 2500 Hz second) against items of each half and of both:
    by the mean rule the item holding both sounds ranks first; by the nearest pair it need not."""
    client.post("/v1/collections", json={"name": "two", "modality": "audio", "window_s": 1.0, "hop_s": 0.5})
    both = np.concatenate([0.3 * np.sin(2 * np.pi * f * np.arange(16000) / 16000) for f in (250, 2500)])
    files = [("files", ("low.wav", tone_wav(250, seconds=2.0))), ("files", ("both.wav", wave_bytes(both)))]
    assert client.post("/v1/collections/two/items", files=files).status_code == 200
    query = wave_bytes(both[::-1].copy())  # the same two sounds, in the other order
    by_mean = client.post("/v1/collections/two/search", files={"file": ("q.wav", query)}, data={"mode": "float"})
    by_min = client.post("/v1/collections/two/search", files={"file": ("q.wav", query)},
                         data={"mode": "float", "item_distance": "min"})
    assert by_mean.status_code == by_min.status_code == 200, (by_mean.text, by_min.text)
    assert by_mean.json()["results"][0]["id"] == "both.wav"
    mean_low = next(r for r in by_mean.json()["results"] if r["id"] == "low.wav")["distance"]
    min_low = next(r for r in by_min.json()["results"] if r["id"] == "low.wav")["distance"]
    assert mean_low > min_low  # low.wav matches only the query's low half
    bad = client.post("/v1/collections/two/search", json={"item_id": "low.wav", "item_distance": "max"})
    assert bad.status_code == 422 and "item_distance" in bad.text
