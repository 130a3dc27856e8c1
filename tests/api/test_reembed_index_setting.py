"""`recall reembed` copies the index setting as created (issue 32): kind, IVF shape and where the floats live."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.cli.reembed import reembed
from app.main import create_app
from recall import RecallClient
from tests.conftest import make_settings, tone_wav

SETTING = {"kind": "ivf", "nlist": 32, "nprobe": 4, "floats": "mmap"}


def test_the_copy_has_the_sources_index_setting_not_its_current_shape(tmp_path) -> None:
    with TestClient(create_app(make_settings(tmp_path))) as client:
        assert client.post("/v1/collections", json={"name": "src", "modality": "audio", "index": SETTING}).status_code == 201
        assert client.post("/v1/collections", json={"name": "plain", "modality": "audio"}).status_code == 201
        for i in range(3):
            for name in ("src", "plain"):
                files = [("files", (f"t{i}.wav", tone_wav(300 + 100 * i)))]
                assert client.post(f"/v1/collections/{name}/items", files=files).status_code in (200, 201)
        source = client.get("/v1/collections/src").json()["index"]
        assert source["setting"] == SETTING and source["floats"] == "mmap"
        # a collection left to the service's defaults shows them as such: null where the service decides
        assert client.get("/v1/collections/plain").json()["index"]["setting"] == {
            "kind": "auto", "nlist": None, "nprobe": None, "floats": "memory"}

        recall = RecallClient("http://testserver")
        recall.http = client
        assert reembed(recall, "src", "dst")["copied"] == 3
        assert reembed(recall, "plain", "plain-copy")["copied"] == 3
        copied = client.get("/v1/collections/dst").json()["index"]
        assert copied["setting"] == SETTING and copied["kind"] == "ivf" and copied["floats"] == "mmap"
        assert client.get("/v1/collections/plain-copy").json()["index"]["setting"]["kind"] == "auto"
