"""Speech views of general-audio version 3 (app/encoders/audio/speech_views.py): numerics against brute-force numpy,
the fused checkpoint's round trip, refused configs, and checkpoints without views answering as before."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.base import l2_normalise
from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from app.encoders.audio.levin_mfcc import MFCC_DIM, downsampled_mfcc, levin_mfcc_batch, levin_mfcc_frames
from app.encoders.registry import load_checkpoint_dir
from app.encoders.audio.routed_fusion import fuse
from app.encoders.audio.speech_views import (PREFIX, SpeechViews, fit_standardisation, fit_whitening, fitted_views,
                                       random_projection)
from app.eval.audio_baselines import mfcc_levin
from tests.encoders.test_routed_fusion import SOUND_BITS, SPEECH_BITS, _waves, fused_dir  # noqa: F401 (fixture)


def _brute_levin(frames: np.ndarray) -> np.ndarray:
    """Levin-style downsampled MFCC by explicit loops: DCT-II sums, voiced span, 10 near-equal segments."""
    n_mels, n_ceps, segments = frames.shape[1], 13, 10
    loud = [max(row) for row in frames]
    keep = [t for t, v in enumerate(loud) if v > max(loud) - 3.0 * math.log(10.0)]
    span = frames[keep[0]: keep[-1] + 1] if len(keep) >= 2 else frames
    cep = np.zeros((len(span), n_ceps))
    for t in range(len(span)):
        for k in range(n_ceps):
            scale = math.sqrt(1.0 / n_mels) if k == 0 else math.sqrt(2.0 / n_mels)
            cep[t, k] = scale * sum(span[t, n] * math.cos(math.pi * k * (2 * n + 1) / (2 * n_mels)) for n in range(n_mels))
    cep -= cep.mean(axis=0)
    out, start = [], 0
    for s in range(segments):  # numpy.array_split: the first len % segments parts one longer
        size = len(cep) // segments + (1 if s < len(cep) % segments else 0)
        out.append(cep[start: start + size].mean(axis=0) if size else cep[-1])
        start += size
    return np.concatenate(out)


@pytest.mark.parametrize("frames_n", [101, 7, 3])
def test_levin_mfcc_matches_brute_force(frames_n: int) -> None:
    rng = np.random.default_rng(frames_n)
    frames = rng.normal(-6.0, 1.0, (frames_n, 40))
    frames[: frames_n // 3] -= 9.0  # a quiet lead-in that the voiced span must cut
    np.testing.assert_allclose(levin_mfcc_frames(frames), _brute_levin(frames), rtol=1e-4, atol=1e-4)


def test_batched_mfcc_equals_the_per_window_one_on_every_span_shape() -> None:
    rng = np.random.default_rng(9)
    frames = rng.normal(-6.0, 1.0, (6, 40, 40)).astype(np.float32)
    frames[0, :30] -= 9.0  # a 10-frame span: one frame per segment
    frames[1, :35] -= 9.0  # 5 frames: five empty segments repeat the last frame
    frames[2, :39] -= 9.0  # one loud frame: fewer than 2 voiced, the whole window is the span
    frames[3, 5:] -= 9.0   # loud lead-in, quiet tail
    frames[4] = -20.0      # digital silence: every frame equally loud
    batched = levin_mfcc_batch(torch.from_numpy(frames)).numpy()
    for i in range(len(frames)):
        np.testing.assert_allclose(batched[i], levin_mfcc_frames(frames[i]), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(batched[i], _brute_levin(frames[i].astype(np.float64)), rtol=1e-3, atol=1e-3)


def test_batched_mfcc_is_the_baseline_before_its_per_set_standardisation() -> None:
    waves = _waves(3, 0.3, seed=11) + [np.r_[np.zeros(6000), _waves(1, 0.5, seed=12, length=4000)[0], np.zeros(6000)].astype(np.float32)]
    raw = downsampled_mfcc(torch.from_numpy(np.stack(waves))).numpy()
    assert raw.shape == (4, MFCC_DIM)
    standardised = (raw - raw.mean(axis=0)) / (raw.std(axis=0) + 1e-6)
    np.testing.assert_allclose(standardised, mfcc_levin(waves), atol=2e-3)


def test_whitening_gives_unit_covariance_above_the_floor_and_damps_below() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4000, 4)) * np.array([10.0, 3.0, 1.0, 0.1]) @ np.linalg.qr(rng.standard_normal((4, 4)))[0]
    mean, mapping = fit_whitening(x, eps=1e-6)
    np.testing.assert_allclose(np.cov(((x - mean) @ mapping).T), np.eye(4), atol=1e-3)
    # floor at 0.05 x the largest variance (100): variances 100 and 9 -> 1; 1 and 0.01 -> 1/5 and 0.01/5
    _, floored = fit_whitening(x, eps=0.05)
    got = np.sort(np.linalg.eigvalsh(np.cov(((x - mean) @ floored).T)))
    lam = np.sort(np.linalg.eigvalsh(np.cov(x.T)))
    np.testing.assert_allclose(got, lam / np.maximum(lam, 0.05 * lam.max()), rtol=1e-3)


def test_forward_is_the_documented_direct_sum() -> None:
    rng = np.random.default_rng(1)
    speech = rng.standard_normal((5, 16)).astype(np.float32)
    waves = np.stack(_waves(5, 0.2, seed=13))
    fit_raw = rng.normal(0, 2, (50, MFCC_DIM)).astype(np.float32)
    views = fitted_views(rng.standard_normal((60, 16)).astype(np.float32), fit_raw, speech_bits=16, whiten_eps=0.1,
                         mfcc_bits=8, seed=3)
    with torch.inference_mode():
        floats, values = views(torch.from_numpy(speech), views.standardised_mfcc(torch.from_numpy(waves)))
    assert floats.shape == (5, 16 + MFCC_DIM) and values.shape == (5, 8)
    # the whitening fitted on the same draws (60 x 16) as fitted_views saw
    mean, mapping = views.white_mean.numpy(), views.white_map.numpy()
    u = (speech - mean) @ mapping
    mu, sd = fit_standardisation(fit_raw)
    z = (np.stack([levin_mfcc_frames(f) for f in views.logmel(torch.from_numpy(waves)).numpy()]) - mu) / sd
    w = math.sqrt(8 / 16)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(floats.numpy(), np.c_[unit(u), w * unit(z)], atol=1e-4)
    # the view's code values: the signs' arguments of the seeded projection
    np.testing.assert_allclose(values.numpy(), z @ random_projection(MFCC_DIM, 8, 3), rtol=1e-4, atol=1e-4)
    # whitening alone has no code of its own
    alone = fitted_views(rng.standard_normal((60, 16)).astype(np.float32), fit_raw, 16, 0.1, 0, 3)
    assert alone.standardised_mfcc(torch.from_numpy(waves)) is None and alone(torch.from_numpy(speech), None)[1] is None
    with pytest.raises(ValueError, match="standardised_mfcc"):
        views(torch.from_numpy(speech), None)


def test_bad_bit_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        SpeechViews(16, 16, whiten=False, mfcc_bits=12)


def _with_views(src: Path, out: Path, whiten_eps: float | None = 0.2, mfcc_bits: int = 16) -> Path:
    """A copy of the tiny fused checkpoint with fitted views, written as the trainer writes it."""
    shutil.copytree(src, out)
    state, config = load_checkpoint(src)
    encoder = load_checkpoint_dir(src)
    rng = np.random.default_rng(5)
    views = fitted_views(rng.standard_normal((40, encoder.speech.dim)).astype(np.float32),
                         rng.normal(0, 2, (40, MFCC_DIM)).astype(np.float32), encoder.speech.bits, whiten_eps, mfcc_bits, 0)
    state.update({PREFIX + k: v for k, v in views.state_dict().items()})
    config = {**config, "version": "8", "speech_views": {"whiten_eps": whiten_eps, "mfcc_bits": mfcc_bits}}
    save_checkpoint(out, state, config)
    return out


def test_checkpoint_with_views_round_trips_and_fuses_as_documented(fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    plain = load_checkpoint_dir(fused_dir)
    viewed = load_checkpoint_dir(_with_views(fused_dir, tmp_path / "v"))
    assert viewed.views is not None and plain.views is None
    # the float grows by the MFCC view; the code keeps its length (the view's bits ride in the sounds half)
    assert (viewed.dim, viewed.bits) == (SPEECH_BITS + MFCC_DIM + SOUND_BITS, SPEECH_BITS + SOUND_BITS)
    loud, quiet = _waves(3, 0.5, seed=4), _waves(2, 0.001, seed=5)
    emb = viewed.encode(loud + quiet)
    assert emb.floats.shape == (5, viewed.dim) and emb.codes.shape == (5, viewed.bits // 8)
    np.testing.assert_allclose(np.linalg.norm(emb.floats, axis=1), 1.0, atol=1e-5)
    # by hand: the branch outputs of the plain encoder, the views, then fuse()
    waves = np.stack(loud + quiet)
    with torch.inference_mode():
        stats = plain.sounds.features(torch.from_numpy(waves))
        sounds, sounds_code = plain.sounds.net.embed(stats)
        speech, speech_code = plain.speech.embed_tensor(plain._speech_waves(waves))
        half, extra = viewed.views(speech, viewed.views.standardised_mfcc(torch.from_numpy(waves)))
        p = plain.router(stats[:, 0]).numpy()
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    expected = np.c_[np.sqrt(p)[:, None] * unit(half.numpy()), np.sqrt(1 - p)[:, None] * unit(sounds.numpy())]
    np.testing.assert_allclose(emb.floats, expected, atol=1e-5)
    # Hamming code, speech windows: [speech code | MFCC projection, then -1]; sound windows: [-1 | sounds code]
    speech_window = np.c_[speech_code.numpy(), extra.numpy(), -np.ones((5, SOUND_BITS - 16))]
    sound_window = np.c_[-np.ones((5, SPEECH_BITS)), sounds_code.numpy()]
    values = np.where((p >= 0.5)[:, None], speech_window, sound_window)
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    np.testing.assert_array_equal(bits, (values > 0).astype(np.uint8))
    assert (p[:3] >= 0.5).all() and (p[3:] < 0.5).all()
    assert bits[:3, SPEECH_BITS:SPEECH_BITS + 16].any() and not bits[:3, SPEECH_BITS + 16:].any()  # loud: MFCC bits
    assert not bits[3:, :SPEECH_BITS].any()  # quiet: the speech half is filler
    # one window (the two-thread query path) gives what it gives inside a batch
    one = viewed.encode(loud[:1])
    np.testing.assert_allclose(one.floats[0], emb.floats[0], atol=1e-5)
    np.testing.assert_array_equal(one.codes[0], emb.codes[0])
    # the whitening only changes the float: the speech bits are the plain encoder's
    np.testing.assert_array_equal(bits[:3, :SPEECH_BITS],
                                  np.unpackbits(plain.encode(loud).codes, axis=1, bitorder="little")[:, :SPEECH_BITS])


def test_mfcc_view_alone_and_whitening_alone_load(fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    only_mfcc = load_checkpoint_dir(_with_views(fused_dir, tmp_path / "m", whiten_eps=None, mfcc_bits=8))
    only_white = load_checkpoint_dir(_with_views(fused_dir, tmp_path / "w", whiten_eps=0.3, mfcc_bits=0))
    assert only_mfcc.bits == only_white.bits == SPEECH_BITS + SOUND_BITS
    assert only_white.dim == SPEECH_BITS + SOUND_BITS and only_mfcc.dim == SPEECH_BITS + MFCC_DIM + SOUND_BITS
    assert only_white.encode(_waves(1, 0.5)).floats.shape == (1, only_white.dim)


def _refused(source: Path, dest: Path, config: dict, match: str) -> None:
    """A copy of ``source`` with ``config`` as its config.json must not load."""
    shutil.copytree(source, dest)
    (dest / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint_dir(dest)


def test_views_and_config_must_agree(fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    viewed = _with_views(fused_dir, tmp_path / "v")
    config = read_config(viewed)
    del config["speech_views"]
    _refused(viewed, tmp_path / "no-config", config, "no speech_views")
    _refused(fused_dir, tmp_path / "no-weights",
             {**read_config(fused_dir), "speech_views": {"whiten_eps": 0.2, "mfcc_bits": 16}}, "speech_views")
    _refused(viewed, tmp_path / "wrong-bits",
             {**read_config(viewed), "speech_views": {"whiten_eps": 0.2, "mfcc_bits": 24}}, "wrong shape")


def test_view_bits_must_fit_the_sounds_half(fused_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    with pytest.raises(CheckpointError, match="do not fit"):
        load_checkpoint_dir(_with_views(fused_dir, tmp_path / "wide", mfcc_bits=SOUND_BITS + 8))


def test_fuse_puts_extra_bits_at_the_start_of_a_speech_windows_sounds_half() -> None:
    torch.manual_seed(2)
    s, sc, t, tc, extra = torch.randn(2, 6), torch.randn(2, 6), torch.randn(2, 5), torch.randn(2, 5), torch.randn(2, 2)
    _, codes = fuse(s, sc, t, tc, torch.tensor([0.9, 0.1]), extra)
    assert torch.equal(codes[0], torch.cat([sc[0], extra[0], -torch.ones(3)]))
    assert torch.equal(codes[1], torch.cat([-torch.ones(6), tc[1]]))


def test_checkpoint_without_views_answers_as_fuse_of_its_branches(fused_dir: Path) -> None:  # noqa: F811
    """Versions 1 and 2 have no views: the encoder's output is exactly fuse() of the branches, as before them."""
    encoder = load_checkpoint_dir(fused_dir)
    waves = np.stack(_waves(2, 0.5, seed=7) + _waves(2, 0.001, seed=8))
    emb = encoder.encode(list(waves))
    with torch.inference_mode():
        stats = encoder.sounds.features(torch.from_numpy(waves))
        sounds, sounds_code = encoder.sounds.net.embed(stats)
        speech, speech_code = encoder.speech.embed_tensor(encoder._speech_waves(waves))
        floats, values = fuse(speech, speech_code, sounds, sounds_code, encoder.router(stats[:, 0]))
    np.testing.assert_array_equal(emb.floats, l2_normalise(floats.numpy()))
    np.testing.assert_array_equal(np.unpackbits(emb.codes, axis=1, bitorder="little"), (values.numpy() > 0).astype(np.uint8))
