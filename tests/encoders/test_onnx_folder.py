"""ONNX encoder folders: loading matches the exported torch modules, broken folders give one clear
problem each, nothing is unpickled, the registry lists folders by version, and PCA + ITQ codes."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from app.cli import main as cli_main
from app.encoders.onnx_folder.check import check_folder, load_folder
from app.encoders.onnx_folder.itq import ItqCodes, fit_itq
from app.encoders.onnx_folder.manifest import FolderError
from app.encoders.registry import create_encoder, discover
from tests.encoders.broken_folders import BROKEN, make_broken
from tests.encoders.onnx_models import (
    DIM, SAMPLE_RATE, WINDOW_S, audio_folder, clip_folder, reference_ids, reference_pixels, unit,
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx")
    clip, image, text = clip_folder(root / "tiny-clip")
    audio, model = audio_folder(root / "tiny-audio")
    return {"root": root, "clip": clip, "image": image, "text": text, "audio": audio, "model": model}


def test_clip_folder_embeds_like_the_torch_modules(folders):
    encoder = load_folder(folders["clip"])
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(32, 32, 3), (40, 60, 3), (90, 33, 3)]]
    expected = unit(folders["image"](torch.from_numpy(np.stack([reference_pixels(i) for i in images]))))
    assert np.abs(encoder.encode(images).floats - expected).max() < 1e-5
    texts = ["a red circle", "The dog on the BLUE background", "unknown words only", "a " * 30]
    ids = torch.from_numpy(np.stack([reference_ids(t, folders["clip"] / "tokenizer.json") for t in texts]))
    assert np.abs(encoder.encode_text(texts).floats - unit(folders["text"](ids))).max() < 1e-5
    assert encoder.encode([]).floats.shape == (0, DIM) and encoder.encode_text([]).floats.shape == (0, DIM)


def test_audio_folder_embeds_like_the_torch_module_and_pads_short_windows(folders):
    encoder = load_folder(folders["audio"])
    assert (encoder.sample_rate, encoder.default_window_s, encoder.fixed_window_s) == (SAMPLE_RATE, WINDOW_S, WINDOW_S)
    rng = np.random.default_rng(1)
    window = int(SAMPLE_RATE * WINDOW_S)
    windows = [rng.standard_normal(window).astype(np.float32) for _ in range(40)] + [np.ones(300, np.float32)]
    # a short window sits centred in the zeros by default, as the built-in encoders place a short clip
    padded = np.stack([np.pad(w, ((window - len(w)) // 2, window - len(w) - (window - len(w)) // 2)) for w in windows])
    expected = unit(folders["model"](torch.from_numpy(padded)))
    emb = encoder.encode(windows)  # 41 windows: two batches of the encoder's 32
    assert np.abs(emb.floats - expected).max() < 1e-5
    assert emb.codes.shape == (41, DIM // 8)
    # "pad": "end" puts the samples first
    folder, _ = audio_folder(folders["root"] / "tiny-audio-end", audio={
        "model": "audio.onnx", "sample_rate": SAMPLE_RATE, "window_s": WINDOW_S, "hop_s": WINDOW_S / 2, "pad": "end"})
    at_end = unit(folders["model"](torch.from_numpy(np.pad(windows[-1], (0, window - len(windows[-1])))[None])))
    assert np.abs(load_folder(folder).encode(windows[-1:]).floats - at_end).max() < 1e-5
    assert np.abs(at_end - expected[-1:]).max() > 1e-3  # the placement matters to this model


def test_check_reports_what_the_folder_holds(folders, capsys):
    report = check_folder(folders["clip"])
    assert report["ok"] and report["licence"] == "MIT" and report["dim"] == DIM and report["version"] == "seed0"
    assert report["providers"] == ["CPUExecutionProvider"] and report["files"] == ["image.onnx", "text.onnx", "tokenizer.json"]
    assert cli_main(["encoders", "check", str(folders["audio"])]) == 0
    out = capsys.readouterr().out
    assert "tiny-audio: usable (onnx-audio, audio, version seed0)" in out and "licence: CC-BY-4.0" in out


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_folder_gives_one_clear_problem(kind, tmp_path, capsys):
    folder = make_broken(tmp_path, kind)
    with pytest.raises(FolderError) as caught:
        load_folder(folder)
    assert caught.value.kind == BROKEN[kind][2], caught.value.message
    assert caught.value.status_code == 422 and str(folder) in caught.value.message
    assert "\n" not in caught.value.message
    assert cli_main(["encoders", "check", str(folder)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"[{BROKEN[kind][2]}]" in err[0], err


def test_nothing_is_unpickled_while_loading(folders, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a pickle was loaded")

    for module, name in [(pickle, "load"), (pickle, "loads"), (pickle, "Unpickler"), (torch, "load"), (np, "load")]:
        monkeypatch.setattr(module, name, refuse)
    load_folder(folders["clip"]).encode_text(["a dog"])
    load_folder(folders["audio"]).encode([np.zeros(100, np.float32)])


def test_registry_lists_folders_by_version_and_broken_ones_by_folder_name(tmp_path):
    root = tmp_path / "onnx"
    clip_folder(root / "tiny-clip", seed=2)
    clip_folder(root / "tiny-clip@seed1", seed=1)  # an older version kept for the collections built with it
    make_broken(root, "checksum")
    make_broken(root, "no_manifest")
    specs = discover(onnx_dirs=[root])
    assert specs["tiny-clip"].version == "seed2" and specs["tiny-clip@seed2"] is specs["tiny-clip"]
    assert specs["tiny-clip@seed1"].version == "seed1" and specs["tiny-clip"].info["licence"] == "MIT"
    assert specs["broken-no-manifest"].modality == "unknown" and "no manifest.json" in specs["broken-no-manifest"].info["problem"]
    encoder = create_encoder("tiny-clip@seed1", specs)
    assert encoder.version == "seed1" and encoder.describe()["licence"] == "MIT"
    with pytest.raises(FolderError, match="sha256"):
        create_encoder("broken-checksum", specs)  # listed at start; refused (with why) when used
    with pytest.raises(FolderError, match="no manifest.json"):
        create_encoder("broken-no-manifest", specs)


def test_a_folder_named_for_another_version_is_refused(tmp_path):
    clip_folder(tmp_path / "onnx" / "tiny-clip@v9")
    specs = discover(onnx_dirs=[tmp_path / "onnx"])
    assert "tiny-clip" not in specs
    with pytest.raises(FolderError, match="name the folder tiny-clip@seed0"):
        create_encoder("tiny-clip@v9", specs)


def test_itq_codes_are_balanced_and_survive_a_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 32)) @ rng.standard_normal((32, 32))  # correlated dimensions
    hasher = fit_itq(x, 16)
    bits = np.unpackbits(hasher.codes(x), axis=1, bitorder="little")
    assert bits.shape == (500, 16) and np.all(np.abs(bits.mean(0) - 0.5) < 0.2)  # centred: no constant bit
    projection = (x - x.mean(0)) @ hasher.projection
    pca_only = fit_itq(x, 16, iterations=0)
    loss = lambda p: np.square(np.sign(p) - p / np.abs(p).mean()).mean()  # noqa: E731 - quantisation loss, scale-free
    assert loss(projection) <= loss((x - x.mean(0)) @ pca_only.projection) + 1e-9
    hasher.save(tmp_path / "codes.npz")
    again = ItqCodes.load(tmp_path / "codes.npz")
    assert np.array_equal(again.codes(x), hasher.codes(x)) and again.fitted_on == 500
    few = fit_itq(x[:3], 16)  # fewer vectors than bits: still a fixed, usable rotation
    assert few.codes(x).shape == (500, 2)
    with pytest.raises(ValueError):
        fit_itq(x, 12)


def test_a_fit_is_never_replaced(tmp_path):
    """Two API processes fitting one collection at once: the second save fails, and it reads the first."""
    rng = np.random.default_rng(1)
    first, second = fit_itq(rng.standard_normal((50, 16)), 8), fit_itq(rng.standard_normal((50, 16)), 8)
    first.save(tmp_path / "c.npz")
    with pytest.raises(FileExistsError):
        second.save(tmp_path / "c.npz")
    assert np.array_equal(ItqCodes.load(tmp_path / "c.npz").projection, first.projection)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.npz"]  # no temporary file left
