"""A general-sounds collection on the shipped sounds-texture checkpoint, through the HTTP API."""

from __future__ import annotations

import numpy as np

from tests.conftest import wave_bytes

RATE = 16000


def _sounds(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = np.arange(3 * RATE) / RATE
    return {
        "hiss": 0.1 * rng.standard_normal(t.size),
        "hum": 0.3 * np.sin(2 * np.pi * 110 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)),
        "whistle": 0.3 * np.sin(2 * np.pi * (1500 + 300 * np.sin(2 * np.pi * 0.5 * t)) * t),
        "clicks": np.where((np.arange(t.size) % 1600) < 40, 0.5, 0.0) * rng.standard_normal(t.size),
    }


def test_sounds_texture_collection_finds_the_same_kind_of_sound(client):
    created = client.post("/v1/collections", json={"name": "sounds", "modality": "audio", "encoder": "sounds-texture"})
    assert created.status_code == 201, created.text
    info = created.json()
    assert info["encoder"] == "sounds-texture" and (info["window_s"], info["hop_s"]) == (2.0, 1.0)

    sounds = _sounds(seed=0)
    files = [("files", (f"{name}.wav", wave_bytes(wave, RATE), "audio/wav")) for name, wave in sounds.items()]
    ingested = client.post("/v1/collections/sounds/items", files=files)
    assert ingested.status_code in (200, 201), ingested.text
    stats = client.get("/v1/collections/sounds").json()
    assert stats["items"] == 4 and stats["segments"] == 4 * 2  # 3 s at a 2 s window, 1 s hop

    # new takes of each sound (other noise, other phase) find their own kind first, in every mode
    queries = _sounds(seed=1)
    for mode in ("binary", "float", "two_stage"):
        for name, wave in queries.items():
            found = client.post("/v1/collections/sounds/search", files={"file": ("q.wav", wave_bytes(wave[RATE // 2 :], RATE), "audio/wav")},
                                data={"k": "4", "mode": mode})
            assert found.status_code == 200, found.text
            results = found.json()["results"]
            assert results[0]["id"] == f"{name}.wav", (mode, name, [r["id"] for r in results])
            assert all(0.0 <= s["start"] < s["end"] <= 3.0 for r in results for s in r["segments"])
