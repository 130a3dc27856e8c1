"""The front-end view (round 3 of issue 37, `general-audio-broad`): `recall train general-audio --views-from V6
--frontend-bits B` keeps the frozen speech_embedding frames' centred mean beside the head, and the encoder answers
as app/encoders/audio/speech_views.py documents, checked by hand with numpy on a tiny version-6-like checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from app.encoders.checkpoint import CheckpointError, load_checkpoint, read_config
from app.encoders.registry import load_checkpoint_dir
from app.encoders.audio.speech_views import PREFIX, random_projection
from app.training.general_audio import recipe as general_audio
from app.training.audio.data import Record, load_waves
from app.training.general_audio.speech_views_fit import fit_paths, window_batches
from tests.training.test_speech_swap import pretrained_speech_checkpoint  # noqa: F401 (fixture)
from tests.training.tiny_corpora import voice_and_hiss

HEAD_BITS, FRONTEND_BITS = 32, 16


@pytest.fixture(scope="module")
def v6_like(built: tuple[Path, list[str], Path], data: Path, pretrained_speech_checkpoint: Path,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("v6") / "v6"
    assert general_audio.main(["--data", str(data), "--speech-from", str(pretrained_speech_checkpoint),
                               "--speech-swap-into", str(built[0]), "--out", str(out), "--version", "6"]) == 0
    return out


@pytest.fixture(scope="module")
def broad(v6_like: Path, data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("broad") / "broad"
    assert general_audio.main(["--data", str(data), "--views-from", str(v6_like), "--frontend-bits", str(FRONTEND_BITS),
                               "--out", str(out), "--name", "broad", "--version", "1"]) == 0
    return out


@pytest.mark.system("espeak-ng")
def test_the_view_holds_the_training_side_mean_frame_and_a_seeded_projection(v6_like: Path, broad: Path, data: Path) -> None:
    config = read_config(broad)
    assert config["speech_views"]["frontend_bits"] == FRONTEND_BITS and config["speech_views"]["mfcc_bits"] == 0
    state, _ = load_checkpoint(broad)
    assert sorted(k for k in state if k.startswith(PREFIX)) == [PREFIX + "frontend_mean", PREFIX + "frontend_proj"]
    # the mean frame, by hand: every service window of the training-side clips, through the frozen front-end
    source = load_checkpoint_dir(v6_like)
    clips = load_waves([Record(str(p), "") for p in fit_paths(data, read_config(v6_like / "speech"), 0)], 16000,
                       cache_dir=None)
    frames = []
    with torch.inference_mode():
        for waves in window_batches(clips, 16000, 1.0, 0.5, source.window):
            frames.append(source.speech.features(torch.from_numpy(waves)).numpy().mean(axis=1))
    np.testing.assert_allclose(state[PREFIX + "frontend_mean"].numpy(), np.concatenate(frames).mean(axis=0), atol=1e-5)
    np.testing.assert_array_equal(state[PREFIX + "frontend_proj"].numpy(), random_projection(96, FRONTEND_BITS, 1))


@pytest.mark.system("espeak-ng")
def test_the_encoder_is_the_documented_direct_sum(v6_like: Path, broad: Path) -> None:
    plain, viewed = load_checkpoint_dir(v6_like), load_checkpoint_dir(broad)
    assert (viewed.dim, viewed.bits) == (plain.dim + 96, plain.bits)
    waves = np.stack(voice_and_hiss())  # one speech window, one hiss
    emb = viewed.encode(list(waves))
    state, _ = load_checkpoint(broad)
    mean, proj = state[PREFIX + "frontend_mean"].numpy(), state[PREFIX + "frontend_proj"].numpy()
    with torch.inference_mode():
        stats = plain.sounds.features(torch.from_numpy(waves))
        sounds, sounds_code = (t.numpy() for t in plain.sounds.net.embed(stats))
        frames = plain.speech.features(torch.from_numpy(waves)).numpy()
        head, head_code = (t.numpy() for t in plain.speech.net.embed(torch.from_numpy(frames)))
        p = plain.router(stats[:, 0]).numpy()
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    centred = frames.mean(axis=1) - mean
    half = unit(np.c_[unit(head), np.sqrt(FRONTEND_BITS / HEAD_BITS) * unit(centred)])
    expected = np.c_[np.sqrt(p)[:, None] * half, np.sqrt(1 - p)[:, None] * unit(sounds)]
    np.testing.assert_allclose(emb.floats, expected, atol=1e-5)
    # code: a speech window is [head bits | the view's bits, then 0s]; a sound window [0s | sounds bits]
    assert p[0] >= 0.5 > p[1]
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little")
    sounds_half = sounds_code.shape[1]
    np.testing.assert_array_equal(bits[0], np.r_[head_code[0] > 0, centred[0] @ proj > 0, np.zeros(sounds_half - FRONTEND_BITS, bool)])
    np.testing.assert_array_equal(bits[1], np.r_[np.zeros(HEAD_BITS, bool), sounds_code[1] > 0])
    # without the view, the same checkpoint answers as version 6 did
    np.testing.assert_array_equal(bits[0, :HEAD_BITS], np.unpackbits(plain.encode(list(waves[:1])).codes, axis=1,
                                                                      bitorder="little")[0, :HEAD_BITS])


@pytest.mark.system("espeak-ng")
def test_the_view_is_refused_where_it_cannot_work(built: tuple[Path, list[str], Path], v6_like: Path, broad: Path,
                                                  data: Path, tmp_path: Path) -> None:
    # a version-5-like source: its speech branch reads log-mel, not a pretrained front-end
    with pytest.raises(SystemExit, match="not on a pretrained front-end"):
        general_audio.main(["--data", str(data), "--views-from", str(built[0]), "--frontend-bits", "16",
                            "--out", str(tmp_path / "x")])
    with pytest.raises(SystemExit, match="exceed"):
        general_audio.main(["--data", str(data), "--views-from", str(v6_like), "--frontend-bits", "512",
                            "--out", str(tmp_path / "y")])
    # a checkpoint whose config names the view over a log-mel speech branch does not load
    bad = tmp_path / "bad"
    shutil.copytree(broad, bad)
    shutil.rmtree(bad / "speech")
    shutil.copytree(built[0] / "speech", bad / "speech")
    with pytest.raises(CheckpointError, match="pretrained front-end"):
        load_checkpoint_dir(bad)
    # the view's bits must be a multiple of 8, as every code width
    config = read_config(broad)
    config["speech_views"]["frontend_bits"] = 12
    (bad / "config.json").write_text(json.dumps(config))
    shutil.rmtree(bad / "speech")
    shutil.copytree(broad / "speech", bad / "speech")
    with pytest.raises((CheckpointError, ValueError), match="multiple of 8"):
        load_checkpoint_dir(bad)
