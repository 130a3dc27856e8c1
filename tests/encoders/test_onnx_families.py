"""The variants the two ONNX families accept: log-mel audio input, a text tower that also takes an
attention mask (as Hugging Face exports CLIP), a model exported with a fixed batch of one, and the
choice of onnxruntime provider."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime
import pytest
import torch

from app.encoders.onnx_folder.check import load_folder
from app.encoders.onnx_folder.session import providers
from app.features.logmel import LogMel
from tests.encoders.onnx_models import (
    CONTEXT, DIM, SAMPLE_RATE, WINDOW_S, TinyAudio, TinyImageTower, WORDS, audio_folder, build_tokenizer, export,
    reference_ids, unit, write_manifest,
)

N_MELS = 16


class MelModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(N_MELS, DIM)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return self.proj(torch.tanh(mel)).mean(1)


class MaskedText(torch.nn.Module):
    """Mean of the embeddings where the attention mask is 1 (pad tokens can be anything)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(len(WORDS) + 4, 12)
        self.proj = torch.nn.Linear(12, DIM)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        mask = attention_mask.float().unsqueeze(-1)
        return self.proj((self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0))


def test_log_mel_input_is_computed_with_the_manifest_s_parameters(tmp_path):
    torch.manual_seed(3)
    folder = tmp_path / "mel"
    folder.mkdir()
    model = MelModel()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.zeros(1, 24, N_MELS),), str(folder / "mel.onnx"), input_names=["mel"],
                          output_names=["embedding"], dynamic_axes={"mel": {0: "batch", 1: "frames"}, "embedding": {0: "batch"}},
                          dynamo=False)
    write_manifest(folder, {
        "format": "recall-encoder/1", "name": "mel", "family": "onnx-audio", "modality": "audio", "dim": DIM,
        "licence": "MIT", "source": "test", "audio": {"model": "mel.onnx", "sample_rate": SAMPLE_RATE, "window_s": WINDOW_S,
                                                      "hop_s": WINDOW_S / 2, "input": "log_mel", "n_mels": N_MELS,
                                                      "win_ms": 32.0, "hop_ms": 16.0}})
    encoder = load_folder(folder)
    assert encoder.fixed_window_s is None  # the frame count is dynamic: any window length works
    rng = np.random.default_rng(0)
    windows = [(0.1 * rng.standard_normal(int(SAMPLE_RATE * WINDOW_S))).astype(np.float32) for _ in range(3)]
    mel = LogMel(SAMPLE_RATE, win_ms=32.0, hop_ms=16.0, n_mels=N_MELS)(torch.from_numpy(np.stack(windows)))
    assert np.abs(encoder.encode(windows).floats - unit(model(mel))).max() < 1e-5
    assert encoder.describe()["input"] == "log_mel"


def test_a_text_tower_with_an_attention_mask_gets_one(tmp_path):
    torch.manual_seed(4)
    folder = tmp_path / "hf-clip"
    folder.mkdir()
    image, text = TinyImageTower(), MaskedText()
    export(image, torch.zeros(1, 3, 32, 32), folder / "image.onnx", "pixel_values", {0: "batch"})
    ids = torch.zeros(1, CONTEXT, dtype=torch.int64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(text.eval(), (ids, torch.ones_like(ids)), str(folder / "text.onnx"),
                          input_names=["input_ids", "attention_mask"], output_names=["text_embeds"],
                          dynamic_axes={"input_ids": {0: "batch"}, "attention_mask": {0: "batch"}, "text_embeds": {0: "batch"}},
                          dynamo=False)
    build_tokenizer(folder / "tokenizer.json")
    write_manifest(folder, {
        "format": "recall-encoder/1", "name": "hf-clip", "family": "onnx-clip", "modality": "image", "dim": DIM,
        "licence": "MIT", "source": "test", "image": {"model": "image.onnx", "size": 32},
        "text": {"model": "text.onnx", "tokenizer": "tokenizer.json", "context_length": CONTEXT, "input_name": "input_ids",
                 "output_name": "text_embeds", "pad_id": 5}})  # a pad id that is a real word: only the mask tells them apart
    encoder = load_folder(folder)
    sentence = "a red circle"
    tokens = [t for t in reference_ids(sentence, folder / "tokenizer.json") if t != 0]
    padded = torch.tensor([tokens + [5] * (CONTEXT - len(tokens))])
    mask = torch.tensor([[1] * len(tokens) + [0] * (CONTEXT - len(tokens))])
    assert np.abs(encoder.encode_text([sentence]).floats - unit(text(padded, mask))).max() < 1e-5


def test_a_model_exported_for_a_batch_of_one_runs_one_input_at_a_time(tmp_path):
    torch.manual_seed(5)
    folder, _ = audio_folder(tmp_path / "one")
    model = TinyAudio()
    window = int(SAMPLE_RATE * WINDOW_S)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), (torch.zeros(1, window),), str(folder / "audio.onnx"), input_names=["waveform"],
                          output_names=["embedding"], dynamo=False)  # no dynamic axes: batch fixed at 1
    import json

    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.pop("files")
    write_manifest(folder, manifest)
    encoder = load_folder(folder)
    assert encoder.one_per_call
    windows = np.random.default_rng(2).standard_normal((3, window)).astype(np.float32)
    assert np.abs(encoder.encode(list(windows)).floats - unit(model(torch.from_numpy(windows)))).max() < 1e-5


def test_cuda_is_used_where_onnxruntime_has_it(monkeypatch):
    assert providers("cpu") == ["CPUExecutionProvider"]
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CPUExecutionProvider"])
    assert providers("cuda") == ["CPUExecutionProvider"]  # the CPU wheel: a GPU service still runs the model
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert providers("cuda") == ["CUDAExecutionProvider", "CPUExecutionProvider"]
    assert providers("cpu") == ["CPUExecutionProvider"]


@pytest.mark.skipif("CUDAExecutionProvider" not in onnxruntime.get_available_providers(), reason="onnxruntime without CUDA")
def test_on_cuda_the_embeddings_match_the_cpu(tmp_path):
    folder, _ = audio_folder(tmp_path / "gpu")
    windows = list(np.random.default_rng(3).standard_normal((4, int(SAMPLE_RATE * WINDOW_S))).astype(np.float32))
    cpu, gpu = load_folder(folder), load_folder(folder, "cuda")
    assert gpu.session.get_providers()[0] == "CUDAExecutionProvider"
    assert np.abs(cpu.encode(windows).floats - gpu.encode(windows).floats).max() < 1e-4


@pytest.mark.skipif("CUDAExecutionProvider" in onnxruntime.get_available_providers(), reason="checks the CPU build's fallback")
def test_asked_for_cuda_without_the_provider_it_says_cpu(tmp_path, caplog):
    folder, _ = audio_folder(tmp_path / "cpu-only")
    encoder = load_folder(folder).to("cuda")
    assert encoder.device == "cpu" and encoder.describe()["device"] == "cpu"
    assert "no CUDA provider" in caplog.text
    assert len(encoder.encode([np.zeros(100, np.float32)])) == 1
