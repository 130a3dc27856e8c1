"""Custom operators in an ONNX encoder folder (issue 33 item 5): none run unless the manifest names the library.

A tiny custom-op library is compiled in the test (tests/encoders/custom_op/add_one.c) and really runs: the
folder that names it embeds exactly x W + 1 (normalised). The same model without ``custom_ops`` is refused
with the operator and its domain named; a library that provides other domains than the model imports, a
library the manifest gives no checksum for, one changed after the manifest was written, and a file that is
not a library are each refused with one clear problem before anything runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.encoders.onnx_folder.check import check_folder, load_folder
from app.encoders.onnx_folder.custom_ops import opset_domains
from app.encoders.onnx_folder.manifest import FolderError
from app.encoders.registry import create_encoder, discover
from tests.encoders.custom_op_folder import DOMAIN, LIBRARY, OP, SAMPLES, compile_library, custom_op_folder, model, reference
from tests.encoders.onnx_models import write_manifest
from tests.system_deps import require_system

pytest.importorskip("onnx")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    require_system("cc")
    return compile_library(tmp_path_factory.mktemp("lib") / LIBRARY)


def _problem(folder) -> FolderError:
    with pytest.raises(FolderError) as caught:
        load_folder(folder)
    assert "\n" not in str(caught.value)
    return caught.value


def test_a_named_library_runs_the_models_custom_op(tmp_path, library):
    folder = custom_op_folder(tmp_path / "encoders" / "tiny-custom", library)
    report = check_folder(folder)
    assert report["custom_ops"] == {"library": LIBRARY, "domains": [DOMAIN]}
    encoder = create_encoder("tiny-custom", discover(onnx_dirs=[tmp_path / "encoders"]), "cpu")
    windows = np.random.default_rng(1).standard_normal((5, SAMPLES)).astype(np.float32)
    assert np.abs(encoder.encode(list(windows)).floats - reference(windows)).max() < 1e-5
    assert encoder.describe()["custom_ops"]["library"] == LIBRARY


def test_the_service_lists_the_library_and_searches_with_the_op(tmp_path, library):
    import io

    import soundfile as sf
    from fastapi.testclient import TestClient

    from app.main import create_app
    from tests.conftest import make_settings
    from tests.encoders.onnx_models import SAMPLE_RATE

    custom_op_folder(tmp_path / "encoders" / "tiny-custom", library)
    settings = make_settings(tmp_path, encoders={"default_audio": "audio-baseline", "default_image": "image-baseline",
                                                 "onnx_dir": str(tmp_path / "encoders")})
    waves = np.random.default_rng(2).uniform(-0.5, 0.5, (3, SAMPLES)).astype(np.float32)
    with TestClient(create_app(settings)) as client:
        row = next(r for r in client.get("/v1/encoders").json()["data"] if r["name"] == "tiny-custom")
        assert row["custom_ops"] == {"library": LIBRARY, "domains": [DOMAIN]}
        assert client.post("/v1/collections", json={"name": "c", "modality": "audio", "encoder": "tiny-custom"}).status_code == 201
        for i, wave in enumerate(waves):
            buffer = io.BytesIO()
            sf.write(buffer, wave, SAMPLE_RATE, format="WAV", subtype="FLOAT")
            response = client.post("/v1/collections/c/items", files={"files": (f"w{i}.wav", buffer.getvalue())}, data={"ids": f"w{i}"})
            assert response.status_code == 200, response.text
        results = client.post("/v1/collections/c/search", json={"item_id": "w1", "k": 2, "mode": "float"}).json()["results"]
        vectors = reference(waves)
        expected = sorted((float(1 - vectors[j] @ vectors[1]), f"w{j}") for j in (0, 2))
        assert [r["id"] for r in results] == [key for _, key in expected]
        assert np.allclose([r["distance"] for r in results], [d for d, _ in expected], atol=1e-5, rtol=0)


def test_without_custom_ops_in_the_manifest_the_op_is_refused_by_name(tmp_path):
    error = _problem(custom_op_folder(tmp_path / "plain", None))
    assert error.kind == "custom_op" and error.details["problem"] == "custom_op"
    assert f"operator {OP} of domain '{DOMAIN}'" in str(error) and "not supported unless the manifest names" in str(error)


def test_a_model_importing_a_domain_the_manifest_does_not_name_is_refused(tmp_path, library):
    error = _problem(custom_op_folder(tmp_path / "other", library, domains=["com.example.other"]))
    assert error.kind == "custom_op" and f"['{DOMAIN}']" in str(error) and "com.example.other" in str(error)


def test_a_named_library_without_the_op_says_so(tmp_path, library):
    # the model's op lives in a domain the manifest names but the library does not provide
    error = _problem(custom_op_folder(tmp_path / "missing-op", library, domains=["com.example.ops"], model_domain="com.example.ops"))
    assert error.kind == "custom_op" and f"{LIBRARY} does not provide" in str(error) and "'com.example.ops'" in str(error)


def test_the_library_is_checksummed_and_must_be_a_library(tmp_path, library):
    folder = custom_op_folder(tmp_path / "tampered", library)
    with (folder / LIBRARY).open("ab") as handle:
        handle.write(b"\0")  # changed after the manifest was written: refused before it is loaded
    assert _problem(folder).kind == "checksum"

    unlisted = custom_op_folder(tmp_path / "unlisted", library)
    manifest = json.loads((unlisted / "manifest.json").read_text())
    del manifest["files"][LIBRARY]
    (unlisted / "manifest.json").write_text(json.dumps(manifest))
    assert _problem(unlisted).kind == "unlisted_file"

    fake = custom_op_folder(tmp_path / "fake", library)
    (fake / LIBRARY).write_bytes(b"not a shared library")
    manifest = json.loads((fake / "manifest.json").read_text())
    manifest.pop("files")
    write_manifest(fake, manifest)  # the checksum now matches the fake
    error = _problem(fake)
    assert error.kind == "custom_op_library" and LIBRARY in str(error)


@pytest.mark.parametrize("bad", [{"library": LIBRARY}, {"library": "ops.py", "domains": [DOMAIN]},
                                 {"library": LIBRARY, "domains": []}, {"library": "../x.so", "domains": [DOMAIN]}])
def test_a_malformed_custom_ops_field_is_a_manifest_error(tmp_path, library, bad):
    folder = custom_op_folder(tmp_path / "bad", library)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["custom_ops"] = bad
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert _problem(folder).kind == "manifest_field"


def test_opset_domains_reads_what_onnx_reads(tmp_path):
    import onnx

    from tests.encoders.onnx_models import audio_folder

    paths = [model(tmp_path / "custom.onnx"), audio_folder(tmp_path / "plain")[0] / "audio.onnx"]
    for path in paths:
        assert opset_domains(path) == [o.domain for o in onnx.load(str(path)).opset_import]
    (tmp_path / "junk.onnx").write_bytes(b"\xff" * 40)
    assert opset_domains(tmp_path / "junk.onnx") == []
