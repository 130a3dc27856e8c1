"""The post-hoc binary codes of an ONNX encoder's collection: fitted on the whole first request (not
only its first commit chunk), refitted by ``recall reembed``, kept by backup and restore, and a lost
fit refused with a clear 409 where codes are needed (float search still answers)."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cli.reembed import reembed
from app.encoders.onnx_folder.itq import ItqCodes
from app.main import create_app
from app.storage.backup import backup, restore
from app.storage.protocol import open_catalog
from app.usecases.ingest import COMMIT_CHUNK
from recall import RecallClient
from tests.api.test_onnx_encoders import _images, _png, _search
from tests.conftest import make_settings
from tests.encoders.onnx_models import clip_folder

N = COMMIT_CHUNK + 8  # more files than one commit chunk (and than the sync limit: a job)


@pytest.fixture
def settings(tmp_path):
    clip_folder(tmp_path / "encoders" / "tiny-clip")
    return make_settings(tmp_path, encoders={"default_audio": "audio-baseline", "default_image": "image-baseline",
                                             "onnx_dir": str(tmp_path / "encoders")})


def _fit(settings, collection: str) -> ItqCodes:
    fits = list((settings.data_dir / "posthoc").glob(f"{collection}@*.npz"))
    assert len(fits) == 1, fits
    return ItqCodes.load(fits[0])


def _client(test_client: TestClient) -> RecallClient:
    recall = RecallClient("http://testserver")
    recall.http = test_client  # the TestClient is an httpx.Client bound to this app
    return recall


def _fill(client: TestClient) -> None:
    rng_images = {f"p{i}": image for i, image in enumerate((_images() | _images_more()).values())}
    recall = _client(client)
    recall.create_collection("photos", "image", encoder="tiny-clip")
    report = recall.ingest("photos", [(f"{key}.png", _png(image)) for key, image in rng_images.items()], ids=list(rng_images))
    assert report["indexed_count"] == N and not report["errors"]  # a job: counts, not rows


def _images_more() -> dict:
    import numpy as np

    rng = np.random.default_rng(11)
    return {f"more-{i}": rng.integers(0, 256, (40, 40, 3), dtype=np.uint8) for i in range(N - len(_images()))}


def test_the_fit_sees_the_whole_first_request_and_reembed_refits(settings):
    with TestClient(create_app(settings)) as client:
        _fill(client)
        assert _fit(settings, "photos").fitted_on == N  # two commit chunks, one fit over both
        assert client.get("/v1/collections/photos").json()["binary_codes"] == {"method": "pca-itq", "bits": 16, "fitted_on": N}
        report = reembed(_client(client), "photos", "photos-again", encoder="tiny-clip")
        assert report["copied"] == N and not report["failed"]
        assert _fit(settings, "photos-again").fitted_on == N  # reembed sends its first files in one request
        for mode in ("float", "two_stage"):  # binary: a new fit (its items came in another order) may rank ties otherwise
            first = _search(client, "photos", text="a red circle", k=5, mode=mode)
            again = _search(client, "photos-again", text="a red circle", k=5, mode=mode)
            assert [(r["id"], round(r["distance"], 5)) for r in first] == [(r["id"], round(r["distance"], 5)) for r in again]
        # a later ingest uses the frozen fit
        more = _images()["img-3"]
        assert client.post("/v1/collections/photos/items", files=[("files", ("late.png", _png(more), "image/png"))]).status_code == 200
        assert _fit(settings, "photos").fitted_on == N


def test_backup_and_restore_keep_the_fit(settings, tmp_path):
    with TestClient(create_app(settings)) as client:
        _fill(client)
        before = _search(client, "photos", text="a blue square", k=6, mode="binary")
    backup(settings.data_dir, tmp_path / "backup")
    restored = settings.model_copy(update={"data_dir": tmp_path / "restored"})
    restore(tmp_path / "backup", restored.data_dir)
    with TestClient(create_app(restored)) as client:
        assert _search(client, "photos", text="a blue square", k=6, mode="binary") == before


def test_a_lost_fit_is_refused_where_codes_are_needed(settings):
    with TestClient(create_app(settings)) as client:
        _fill(client)
    for path in (settings.data_dir / "posthoc").glob("photos@*.npz"):
        path.unlink()
    with TestClient(create_app(settings)) as client:
        assert len(_search(client, "photos", text="a red circle", k=3, mode="float")) == 3
        for mode in ("binary", "two_stage"):
            response = client.post("/v1/collections/photos/search", json={"text": "a red circle", "k": 3, "mode": mode})
            assert response.status_code == 409 and "recall reembed" in response.json()["error"]["message"]
        response = client.post("/v1/collections/photos/items", files=[("files", ("x.png", _png(_images()["img-1"]), "image/png"))])
        assert response.status_code == 409 and "binary-code fit" in response.json()["error"]["message"]
        assert client.get("/v1/collections/photos").json()["items"] == N  # nothing was added


def test_reembed_refits_a_fit_made_on_a_small_first_request(settings):
    """A collection whose first request held 2 images fitted its codes on 2 vectors (frozen after); `recall
    reembed` builds the new collection's fit on everything it copies, and its binary search ranks by that fit."""
    images = {f"p{i}": image for i, image in enumerate((_images() | _images_more()).values())}
    with TestClient(create_app(settings)) as client:
        recall = _client(client)
        recall.create_collection("small", "image", encoder="tiny-clip")
        files = [(f"{key}.png", _png(image)) for key, image in images.items()]
        recall.ingest("small", files[:2], ids=list(images)[:2])
        recall.ingest("small", files[2:], ids=list(images)[2:])
        assert _fit(settings, "small").fitted_on == 2  # frozen: later requests do not refit
        report = reembed(_client(client), "small", "small-again", encoder="tiny-clip")
        assert report["copied"] == N and not report["failed"]
        old, new = _fit(settings, "small"), _fit(settings, "small-again")
        assert new.fitted_on == N and not np.allclose(old.projection, new.projection)
        assert client.get("/v1/collections/small-again").json()["binary_codes"]["fitted_on"] == N
        # the new collection stores the new fit's codes, and binary search ranks by them (brute force over the catalog)
        catalog = open_catalog(settings.catalog_url, settings.data_dir)
        stored = {key: catalog.item_segments("small-again", key, 16, 16) for key in images}
        for key, (_, _, floats, codes) in stored.items():
            assert np.array_equal(codes, new.codes(floats))
        query = stored["p5"][3][0]
        expected = {key: float(np.unpackbits(codes[0] ^ query).sum()) for key, (_, _, _, codes) in stored.items() if key != "p5"}
        results = _search(client, "small-again", item_id="p5", k=N - 1, mode="binary")
        assert {r["id"]: r["distance"] for r in results} == expected
