"""Every kind of bad input: a clear 4xx in the one error shape, and nothing changes."""

import base64

import pytest

from tests.api.seeded_service import _snapshot, seeded  # noqa: F401 (a fixture)
from tests.conftest import error_of, png_bytes, tone_wav


def _ingest(client, name, filename, data):
    return client.post(f"/v1/collections/{name}/items", files=[("files", (filename, data))])


BAD_INGESTS = [
    ("empty file", "a", "e.wav", b"", 422),
    ("corrupt audio", "a", "c.wav", b"RIFF\x24\x00\x00\x00WAVEfmt garbage garbage", 422),
    ("truncated audio", "a", "t.wav", tone_wav(seconds=1.0)[:2000], 422),
    ("unsupported format", "a", "x.txt", b"just some text, not audio at all" * 4, 415),
    ("wrong modality", "a", "p.png", png_bytes((1, 2, 3)), 415),
    ("too short", "a", "s.wav", tone_wav(seconds=0.05), 422),
    ("too long", "a", "l.wav", tone_wav(seconds=6.0, rate=8000), 413),
    ("corrupt image", "img", "c.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, 422),
    ("truncated image", "img", "t.png", png_bytes((9, 9, 9), size=(90, 90), stripes=True)[:200], 422),
    ("image over pixel limit", "img", "big.png", png_bytes((9, 9, 9), size=(200, 200)), 413),
    ("audio into image collection", "img", "a.wav", tone_wav(), 415),
]


@pytest.mark.parametrize("case,name,filename,data,status", BAD_INGESTS, ids=[c[0] for c in BAD_INGESTS])
def test_bad_file_is_refused_and_changes_nothing(seeded, case, name, filename, data, status):
    before = _snapshot(seeded)
    response = _ingest(seeded, name, filename, data)
    assert response.status_code == status, response.text
    error = error_of(response)
    assert filename in error["message"] or filename in str(error.get("details")), error
    assert _snapshot(seeded) == before


def test_upload_over_size_limit_is_413(seeded):
    before = _snapshot(seeded)
    response = _ingest(seeded, "a", "huge.wav", b"\0" * 500_000)
    assert response.status_code == 413
    assert "limit" in error_of(response)["message"]
    assert _snapshot(seeded) == before


def test_a_stray_body_on_a_read_route_is_not_refused_with_an_undocumented_413(seeded):
    # GET and DELETE routes do not document 413: they never read a body, so none is refused there
    response = seeded.request("GET", "/v1/collections", content=b"\0" * 500_000)
    assert response.status_code == 200
    listed = seeded.app.openapi()["paths"]["/v1/collections"]["get"]["responses"]
    assert "413" not in listed


@pytest.mark.parametrize(
    "body,content_type,status",
    [
        (b"{not json", "application/json", 400),
        (b'{"items": [{"id": "x", "content_base64": "***"}]}', "application/json", 400),
        (b'{"items": []}', "application/json", 422),
        (b'{"files": 1}', "application/json", 422),
        (b"plain", "text/plain", 400),
    ],
)
def test_malformed_ingest_bodies(seeded, body, content_type, status):
    before = _snapshot(seeded)
    response = seeded.post("/v1/collections/a/items", content=body, headers={"content-type": content_type})
    assert response.status_code == status, response.text
    error_of(response)
    assert _snapshot(seeded) == before


def test_ids_and_metadata_must_match_files(seeded):
    files = [("files", ("one.wav", tone_wav())), ("files", ("two.wav", tone_wav(600)))]
    assert seeded.post("/v1/collections/a/items", files=files, data={"ids": "only-one"}).status_code == 422
    assert seeded.post("/v1/collections/a/items", files=files, data={"metadata": "[{}]"}).status_code == 422
    assert seeded.post("/v1/collections/a/items", files=files, data={"metadata": "{oops"}).status_code == 400


@pytest.mark.parametrize(
    "body,status",
    [
        ({"item_id": "keep.wav", "k": 0}, 422),
        ({"item_id": "keep.wav", "k": 100000}, 422),
        ({"item_id": "keep.wav", "mode": "fuzzy"}, 422),
        ({"item_id": "missing"}, 404),
        ({}, 422),
        ({"item_id": "keep.wav", "text": "both"}, 422),
        ({"text": "a dog"}, 422),
        ({"content_base64": "!!"}, 400),
        ({"content_base64": base64.b64encode(b"nonsense bytes").decode()}, 415),
    ],
)
def test_bad_searches(seeded, body, status):
    response = seeded.post("/v1/collections/a/search", json=body)
    assert response.status_code == status, response.text
    error_of(response)


def test_text_search_needs_a_text_encoder(seeded):
    response = seeded.post("/v1/collections/img/search", json={"text": "a red square"})
    assert response.status_code == 422
    assert "text" in error_of(response)["message"]


def test_unknown_route_and_method_use_the_error_shape(seeded):
    assert error_of(seeded.get("/v1/nothing-here"))["code"] == "not_found"
    assert seeded.put("/v1/collections").status_code == 405
