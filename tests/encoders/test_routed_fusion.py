"""routed-fusion encoder: one vector space from a speech and a sounds branch, routed by p(speech).

The checkpoint is built here from tiny untrained branches; the router's weights are set by hand
so that which windows count as speech is known exactly.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.base import check_embeddings
from app.encoders.checkpoint import CheckpointError, save_checkpoint
from app.encoders.registry import discover, load_checkpoint_dir
from app.encoders.audio.routed_fusion import Router, fuse
from app.encoders.audio.texture import TextureNet
from app.features.texture import TextureStats
from app.training.audio.train import TrainConfig, build_model, model_config
from app.training.general_audio.router_fit import assemble

SPEECH_BITS, SOUND_BITS = 32, 16
TEXTURE = {"kind": "texture", "sample_rate": 16000, "n_mels": 16, "bands": 4, "mod_bins": 4, "pcen": False,
           "win_ms": 25.0, "hop_ms": 10.0}


def _speech_branch(directory: Path) -> Path:
    torch.manual_seed(0)
    cfg = TrainConfig(manifest="unused.csv", model="attn-hash", out="unused", name="speech", bits=SPEECH_BITS,
                      sample_rate=8000, window_s=1.0, hop_s=0.5, hidden=8, heads=2, d_a=6)
    config = model_config(cfg)
    _, net = build_model(config)
    return save_checkpoint(directory, net.state_dict(), config)


def _sounds_branch(directory: Path) -> Path:
    torch.manual_seed(1)
    n_in = TextureStats(**{k: v for k, v in TEXTURE.items() if k != "kind"})(torch.zeros(1, 16000)).shape[2]
    arch = {"n_in": n_in, "whiten_dim": 8, "hidden": 16, "head_dim": 8, "bits": SOUND_BITS}
    net = TextureNet(**arch)
    with torch.no_grad():
        net.whiten.copy_(torch.randn(n_in, 8) * 0.1)
    config = {"family": "texture-mlp", "modality": "audio", "name": "sounds", "sample_rate": 16000, "window_s": 1.0,
              "hop_s": 0.5, "features": TEXTURE, "arch": arch, "bits": SOUND_BITS}
    return save_checkpoint(directory, net.state_dict(), config)


def _loud_router(n_in: int, threshold: float) -> Router:
    """p(speech) > 0.5 exactly when the first statistic (band 0's mean log-mel) exceeds ``threshold``."""
    router = Router(n_in)
    with torch.no_grad():
        router.weight[0] = 50.0
        router.bias[0] = -50.0 * threshold
    return router


@pytest.fixture(scope="module")
def fused_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fusion")
    speech, sounds = _speech_branch(root / "speech-src"), _sounds_branch(root / "sounds-src")
    stats = load_checkpoint_dir(sounds).features
    quiet, loud = _waves(1, 0.001), _waves(1, 0.5)
    levels = [float(stats(torch.from_numpy(w[None]))[0, 0, 0]) for w in (quiet[0], loud[0])]
    router = _loud_router(stats(torch.zeros(1, 16000)).shape[2], threshold=sum(levels) / 2)
    config = {"name": "tiny-general", "modality": "audio", "sample_rate": 16000, "window_s": 1.0, "hop_s": 0.5,
              "version": "7"}
    return assemble(root / "tiny-general", speech, sounds, router, config, {"note": "test"})


def _waves(n: int, scale: float, seed: int = 3, length: int = 16000) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal(length)).astype(np.float32) for _ in range(n)]


def test_fuse_is_a_direct_sum_with_unit_rows_and_filler_halves() -> None:
    torch.manual_seed(0)
    s, sc, t, tc = torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 3), torch.randn(4, 3)
    p = torch.tensor([1.0, 0.8, 0.2, 0.0])
    floats, codes = fuse(s, sc, t, tc, p)
    torch.testing.assert_close(floats.norm(dim=1), torch.ones(4))
    # the speech half is sqrt(p) times the unit speech vector, the sounds half sqrt(1 - p) times the unit sounds one
    torch.testing.assert_close(floats[:, :6], torch.sqrt(p)[:, None] * torch.nn.functional.normalize(s, dim=1))
    torch.testing.assert_close(floats[:, 6:], torch.sqrt(1 - p)[:, None] * torch.nn.functional.normalize(t, dim=1))
    # codes: the routed branch's values, the other half all -1 (bits 0)
    assert torch.equal(codes[:2, :6], sc[:2]) and torch.equal(codes[:2, 6:], -torch.ones(2, 3))
    assert torch.equal(codes[2:, 6:], tc[2:]) and torch.equal(codes[2:, :6], -torch.ones(2, 6))


def test_fused_cosine_is_the_hand_computed_mixture() -> None:
    torch.manual_seed(1)
    s, t = torch.randn(2, 5), torch.randn(2, 4)
    p = torch.tensor([0.9, 0.6])
    floats, _ = fuse(s, s, t, t, p)
    cs = torch.nn.functional.cosine_similarity(s[0:1], s[1:2])[0]
    ct = torch.nn.functional.cosine_similarity(t[0:1], t[1:2])[0]
    expected = torch.sqrt(p[0] * p[1]) * cs + torch.sqrt((1 - p[0]) * (1 - p[1])) * ct
    torch.testing.assert_close(floats[0] @ floats[1], expected)


def test_loaded_encoder_routes_loud_windows_to_speech_and_quiet_ones_to_sounds(fused_dir: Path) -> None:
    encoder = load_checkpoint_dir(fused_dir)
    assert (encoder.dim, encoder.bits) == (SPEECH_BITS + SOUND_BITS, SPEECH_BITS + SOUND_BITS)
    assert encoder.name == "tiny-general" and encoder.sample_rate == 16000 and encoder.default_window_s == 1.0
    loud, quiet = _waves(3, 0.5, seed=4), _waves(3, 0.001, seed=5)
    emb = check_embeddings(encoder.encode(loud + quiet), n=6, dim=48, bits=48)
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    speech_half, sound_half = bits[:, :SPEECH_BITS], bits[:, SPEECH_BITS:]
    assert not sound_half[:3].any() and speech_half[:3].any()  # loud: speech bits, sound half filler
    assert not speech_half[3:].any() and sound_half[3:].any()  # quiet: the other way round
    # float halves agree with the routing: a loud window's weight sits in its speech half
    assert (np.linalg.norm(emb.floats[:3, :SPEECH_BITS], axis=1) > 0.9).all()
    assert (np.linalg.norm(emb.floats[3:, SPEECH_BITS:], axis=1) > 0.9).all()


def test_speech_branch_sees_each_window_resampled_to_its_rate(fused_dir: Path) -> None:
    import soxr

    encoder = load_checkpoint_dir(fused_dir)
    speech = load_checkpoint_dir(fused_dir / "speech")
    waves = _waves(2, 0.5, seed=6)
    fused = encoder.encode(waves)
    alone = speech.encode([soxr.resample(w, 16000, 8000) for w in waves])
    np.testing.assert_allclose(fused.floats[:, :SPEECH_BITS] / np.linalg.norm(fused.floats[:, :SPEECH_BITS], axis=1, keepdims=True),
                               alone.floats, atol=1e-5)
    assert np.array_equal(fused.codes[:, : SPEECH_BITS // 8], alone.codes)


def test_short_and_long_inputs_are_fitted_to_the_window(fused_dir: Path) -> None:
    encoder = load_checkpoint_dir(fused_dir)
    emb = encoder.encode([np.zeros(100, np.float32), _waves(1, 0.3, length=40000)[0]])
    assert emb.floats.shape == (2, 48) and np.isfinite(emb.floats).all()
    assert encoder.encode([]).floats.shape == (0, 48)


def test_registry_finds_the_fused_checkpoint_by_name(fused_dir: Path) -> None:
    specs = discover([fused_dir])
    assert specs["tiny-general"].modality == "audio"
    assert specs["tiny-general"].factory().bits == 48


def test_missing_branch_or_mismatched_router_is_refused(fused_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(fused_dir, broken)
    shutil.rmtree(broken / "sounds")
    with pytest.raises(CheckpointError, match="sounds"):
        load_checkpoint_dir(broken)

    wrong = tmp_path / "wrong"
    shutil.copytree(fused_dir, wrong)
    config = json.loads((wrong / "config.json").read_text())
    save_checkpoint(wrong, Router(5).state_dict(), config)
    with pytest.raises(CheckpointError, match="router"):
        load_checkpoint_dir(wrong)
