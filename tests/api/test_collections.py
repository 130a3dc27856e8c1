from tests.conftest import error_of


def test_create_list_inspect_delete_collection(client):
    created = client.post("/v1/collections", json={"name": "sounds", "modality": "audio"})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["encoder"] == "audio-baseline"
    assert body["index_kinds"] == ["binary", "float"]
    assert body["window_s"] == 1.0 and body["hop_s"] == 0.5
    assert body["items"] == 0 and body["keep_media"] is True

    client.post("/v1/collections", json={"name": "pics", "modality": "image", "index_kinds": ["binary"]})
    listed = client.get("/v1/collections").json()
    assert [c["name"] for c in listed["data"]] == ["pics", "sounds"] and listed["count"] == 2
    assert client.get("/v1/collections/pics").json()["index_kinds"] == ["binary"]

    assert client.delete("/v1/collections/sounds").status_code == 204
    assert client.get("/v1/collections/sounds").status_code == 404
    assert [c["name"] for c in client.get("/v1/collections").json()["data"]] == ["pics"]


def test_collection_options_are_validated(client):
    cases = [
        ({"name": "x", "modality": "video"}, 422),
        ({"name": "bad name!", "modality": "audio"}, 422),
        ({"name": "x", "modality": "audio", "encoder": "nope"}, 422),
        ({"name": "x", "modality": "audio", "encoder": "image-baseline"}, 422),
        ({"name": "x", "modality": "audio", "window_s": 1.0, "hop_s": 2.0}, 422),
        ({"name": "x", "modality": "audio", "index_kinds": []}, 422),
        ({"name": "x", "modality": "audio", "typo_option": 1}, 422),
    ]
    for body, status in cases:
        response = client.post("/v1/collections", json=body)
        assert response.status_code == status, (body, response.text)
        error_of(response)
    assert client.get("/v1/collections").json()["count"] == 0


def test_duplicate_collection_is_a_conflict(client):
    assert client.post("/v1/collections", json={"name": "a", "modality": "audio"}).status_code == 201
    response = client.post("/v1/collections", json={"name": "a", "modality": "image"})
    assert response.status_code == 409
    assert "already exists" in error_of(response)["message"]


def test_unknown_collection_is_404_everywhere(client):
    for method, path in [
        ("GET", "/v1/collections/nope"),
        ("DELETE", "/v1/collections/nope"),
        ("GET", "/v1/collections/nope/items"),
        ("GET", "/v1/collections/nope/items/x"),
        ("POST", "/v1/collections/nope/search"),
    ]:
        response = client.request(method, path, json={"item_id": "x"} if method == "POST" else None)
        assert response.status_code == 404, (method, path, response.text)
        assert error_of(response)["code"] == "not_found"


def test_encoders_are_listed(client):
    data = client.get("/v1/encoders").json()["data"]
    names = {e["name"]: e for e in data}
    assert {"audio-baseline", "image-baseline"} <= set(names)
    assert names["audio-baseline"]["loaded"] and names["audio-baseline"]["sample_rate"] == 16000
    assert names["audio-baseline"]["bits"] % 8 == 0
