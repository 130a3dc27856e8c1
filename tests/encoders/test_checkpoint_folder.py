"""A trained checkpoint of a family the project has (safetensors weights), brought as an encoder folder
with a manifest: its checksums are checked, its licence and source listed, and it embeds exactly as the
same checkpoint loaded the ordinary way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.cli import main as cli_main
from app.encoders.checkpoint import save_checkpoint
from app.encoders.onnx_folder.manifest import FolderError
from app.encoders.registry import create_encoder, discover, load_checkpoint_dir
from app.training.audio.train import TrainConfig, build_model, model_config
from tests.encoders.onnx_models import write_manifest


def _checkpoint_folder(folder: Path, **overrides) -> Path:
    cfg = TrainConfig(manifest="unused.csv", model="siamese-mlp", out="unused", name="fine-tuned", bits=16,
                      sample_rate=8000, window_s=0.5, hop_s=0.25)
    config = model_config(cfg)
    config["features"].update(n_fft=512, n_bands=20)
    _, net = build_model(config)
    save_checkpoint(folder, net.state_dict(), config)
    dim = load_checkpoint_dir(folder).dim
    return write_manifest(folder, {"format": "recall-encoder/1", "name": "fine-tuned", "family": "checkpoint",
                                   "modality": "audio", "dim": dim, "licence": "CC BY 4.0", "version": "ours-1",
                                   "source": "fine-tuned on our own catalogue", **overrides})


def _windows() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [(0.1 * rng.standard_normal(4000)).astype(np.float32) for _ in range(5)]


def test_a_checkpoint_folder_embeds_like_the_checkpoint(tmp_path):
    folder = _checkpoint_folder(tmp_path / "onnx" / "fine-tuned")
    specs = discover(onnx_dirs=[tmp_path / "onnx"])
    spec = specs["fine-tuned"]
    assert spec.version == "ours-1" and spec.info["licence"] == "CC BY 4.0" and "fine-tuned@ours-1" in specs
    encoder = create_encoder("fine-tuned", specs)
    plain = load_checkpoint_dir(folder)
    a, b = encoder.encode(_windows()), plain.encode(_windows())
    assert np.array_equal(a.floats, b.floats) and np.array_equal(a.codes, b.codes)  # its own trained codes
    assert not getattr(encoder, "posthoc_codes", False)
    assert cli_main(["encoders", "check", str(folder)]) == 0


def test_a_changed_checkpoint_is_refused(tmp_path):
    folder = _checkpoint_folder(tmp_path / "fine-tuned")
    with (folder / "weights.safetensors").open("ab") as handle:
        handle.write(b"\0")
    specs = discover(onnx_dirs=[tmp_path])
    with pytest.raises(FolderError, match="weights.safetensors has sha256") as caught:
        create_encoder("fine-tuned", specs)
    assert caught.value.kind == "checksum"


def test_a_manifest_that_misdescribes_the_checkpoint_is_refused(tmp_path):
    folder = _checkpoint_folder(tmp_path / "fine-tuned", dim=24)
    with pytest.raises(FolderError, match="the manifest says audio in 24") as caught:
        create_encoder("fine-tuned", discover(onnx_dirs=[tmp_path]))
    assert caught.value.kind == "shape"
    (folder / "config.json").write_text("{}")
    write_manifest(folder, {"format": "recall-encoder/1", "name": "fine-tuned", "family": "checkpoint", "modality": "audio",
                            "dim": 16, "licence": "x", "source": "y"})
    with pytest.raises(FolderError, match="does not load") as caught:
        create_encoder("fine-tuned", discover(onnx_dirs=[tmp_path]))
    assert caught.value.kind == "checkpoint"
