"""`general-audio`, the routed fusion of speech and sounds (the default until 2026-11-27, now the named variant whose
sounds branch and router learnt from ESC-50): one code for speech and sounds, each window routed by the learned router.

Checked on sounds made here (no data set needed): a spoken-like harmonic sweep goes to the speech
half, steady noise and silence to the sounds half, and the codes keep the direct-sum layout. Version 6
(the latest) runs Google's pretrained speech_embedding under its speech head; versions 1-5 stay loadable.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.encoders.registry import create_encoder, discover
from app.settings import EncoderSettings
from tests.encoders.eager_answers import eager_encode

SPEECH_HALF = 256  # trained speech bits; in versions 3-5 a speech window's MFCC bits are the next 64


@pytest.fixture(scope="module")
def encoder():
    return create_encoder("general-audio", discover())


@pytest.fixture(scope="module")
def version_5():
    return create_encoder("general-audio@5", discover())


def test_default_is_a_routed_fusion_of_the_speech_and_sounds_branches(encoder) -> None:
    assert encoder.name == "general-audio" != EncoderSettings().default_audio  # the default is the commercial twin
    assert encoder.config["family"] == "routed-fusion" and encoder.version == encoder.config["version"] == "6"
    assert (encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s) == (16000, 1.0, 0.5)
    # version 6: the speech head reads the pretrained front-end's frames at the service rate; no views
    assert encoder.speech.config["features"] == {"kind": "speech-embedding", "pad_s": 0.4}
    assert encoder.speech.sample_rate == 16000 and encoder.views is None
    assert (encoder.bits, encoder.speech.bits, encoder.dim) == (512, 256, encoder.speech.dim + encoder.sounds.dim)
    assert encoder.config["reproduce"]["train"].startswith("recall train general-audio ")


def test_noise_and_silence_go_to_the_sounds_half(encoder) -> None:
    rng = np.random.default_rng(0)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32)]
    bits = np.unpackbits(encoder.encode(windows).codes, axis=1, bitorder="little")
    assert not bits[:, :SPEECH_HALF].any() and bits[:, SPEECH_HALF:].any(axis=1).all()


def test_same_input_gives_the_same_code_whatever_the_batch(encoder) -> None:
    rng = np.random.default_rng(1)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32) for _ in range(3)]
    together = encoder.encode(windows)
    alone = encoder.encode(windows[1:2])
    np.testing.assert_array_equal(together.codes[1], alone.codes[0])
    np.testing.assert_allclose(together.floats[1], alone.floats[0], atol=1e-5)


def test_on_cpu_both_halves_run_traced_and_answer_exactly_as_the_eager_modules(encoder) -> None:
    rng = np.random.default_rng(2)
    t = np.arange(16000, dtype=np.float32) / 16000
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32),
               (0.5 * np.sin(2 * np.pi * 220 * t) * (t < 0.4)).astype(np.float32),  # a short burst: the MFCC's voiced span
               (0.01 * rng.standard_normal(7000)).astype(np.float32)]  # shorter than the window: padded
    for _ in range(12):  # past the runs after which TorchScript may optimise a graph: still the same numbers
        encoder.encode(windows)
    traced = [encoder.encode(windows), encoder.encode(windows[:1]), encoder.encode(windows[2:3])]
    assert all(type(step).__name__ == "TracedStep" for step in encoder.steps.built)
    eager = eager_encode(encoder, windows, windows[:1], windows[2:3])
    for got, want in zip(traced, eager):
        np.testing.assert_array_equal(got.floats, want.floats)
        np.testing.assert_array_equal(got.codes, want.codes)


def test_the_sound_statistics_and_the_mfcc_view_share_one_stft_with_the_same_answers(version_5) -> None:
    sounds = version_5.steps.eager.sounds
    assert sounds.shared_stft
    rng = np.random.default_rng(3)
    audio = torch.from_numpy((0.1 * rng.standard_normal((3, 16000))).astype(np.float32))
    with torch.inference_mode():
        shared = sounds(audio)
        sounds.shared_stft = False
        try:
            separate = sounds(audio)
        finally:
            sounds.shared_stft = True
    for got, want in zip(shared, separate):
        assert torch.equal(got, want)


@pytest.mark.system("espeak-ng")
def test_spoken_words_go_to_the_speech_half_in_several_languages(encoder) -> None:
    from app.training.synthesis.speech import Voice, espeak_binary, synthesise

    binary = espeak_binary()
    windows = []
    for language, text in (("en-us", "window"), ("de", "fenster"), ("ar", "nafitha")):
        wave = synthesise(binary, Voice(language, "", 50, 160), text, 16000)
        windows.append(np.pad(wave, (0, max(0, 16000 - len(wave))))[:16000])
    bits = np.unpackbits(encoder.encode(windows).codes, axis=1, bitorder="little")
    assert bits[:, :SPEECH_HALF].any(axis=1).all() and not bits[:, SPEECH_HALF:].any()  # version 6: no view bits


@pytest.mark.parametrize("version", ["1", "2"])
def test_the_previous_defaults_still_answer_for_collections_built_with_them(encoder, version: str) -> None:
    specs = discover()
    previous = create_encoder(f"general-audio@{version}", specs)
    assert previous.name == encoder.name == "general-audio" and previous.version == version != encoder.version
    assert previous.views is None and (previous.dim, previous.bits) == (512, 512)
    assert specs["general-audio"].source == specs[f"general-audio@{encoder.version}"].source
    t = np.arange(16000, dtype=np.float32) / 16000
    window = [(0.3 * np.sin(2 * np.pi * 180 * t * (1 + 0.3 * t))).astype(np.float32)]
    assert previous.encode(window).floats.shape == encoder.encode(window).floats.shape == (1, 512)
    assert not np.allclose(previous.encode(window).floats, encoder.encode(window).floats)


def test_version_3_keeps_version_2s_branches_and_router() -> None:
    """Version 3 adds views only: its trained speech bits and its sounds half are version 2's, window for window."""
    specs = discover()
    version_3, version_2 = create_encoder("general-audio@3", specs), create_encoder("general-audio@2", specs)
    assert version_3.version == "3" and version_3.config["speech_views"]["from"]["version"] == "2"
    rng = np.random.default_rng(3)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32)]
    new = np.unpackbits(version_3.encode(windows).codes, axis=1, bitorder="little")
    old = np.unpackbits(version_2.encode(windows).codes, axis=1, bitorder="little")
    np.testing.assert_array_equal(new, old)  # noise and silence: sound windows, whose codes views do not touch


def test_version_4_is_version_3_with_only_its_router_fitted_again() -> None:
    specs = discover()
    version_4, previous = create_encoder("general-audio@4", specs), create_encoder("general-audio@3", specs)
    assert version_4.version == "4" and version_4.config["router_from"] == {"name": "general-audio", "version": "3"}
    assert version_4.config["router_negatives"] == "varied"
    assert version_4.config["speech_views"] == previous.config["speech_views"]
    for ours, theirs in ((version_4.speech.net, previous.speech.net), (version_4.sounds.net, previous.sounds.net),
                         (version_4.views, previous.views)):
        assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    assert not torch.equal(version_4.router.weight, previous.router.weight)
    rng = np.random.default_rng(4)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32)]
    np.testing.assert_array_equal(version_4.encode(windows).codes, previous.encode(windows).codes)  # both sound windows


def test_version_5_changes_only_the_speech_branch_a_weight_average_of_fine_tunes(version_5) -> None:
    """Version 5 averages six fine-tunes' speech branches (one is version 2's); its sounds branch and router are
    version 4's, so a sound window's code is the same; a speech window's is not."""
    encoder = version_5
    version_4, version_2 = create_encoder("general-audio@4", discover()), create_encoder("general-audio@2", discover())
    assert encoder.version == "5" and len(encoder.config["speech_soup"]["of"]) == 6
    assert encoder.config["speech_soup"]["of"][0]["path"] == "app/assets/models/general-audio@2"
    assert all(step["train"].startswith("recall train general-audio ") for step in encoder.config["speech_soup"]["of"])
    assert encoder.config["speech_views"]["whiten_eps"] == version_4.config["speech_views"]["whiten_eps"]
    for ours, theirs in ((encoder.sounds.net, version_4.sounds.net), (encoder.router, version_4.router)):
        assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    # the hash layer's thresholds were estimated for the averaged weights, not copied from an ingredient
    assert not torch.equal(encoder.speech.net.hash_norm.running_mean, version_2.speech.net.hash_norm.running_mean)
    assert not torch.equal(encoder.speech.net.hash.weight, version_2.speech.net.hash.weight)
    rng = np.random.default_rng(5)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32)]
    np.testing.assert_array_equal(encoder.encode(windows).codes, version_4.encode(windows).codes)  # sound windows


def test_version_6_keeps_version_5s_sounds_branch_and_router(encoder, version_5) -> None:
    """Version 6 swaps the speech branch only (``--speech-swap-into``): sound windows get version 5's codes."""
    assert encoder.config["speech_swap"]["sounds_and_router_from"]["version"] == "5"
    for ours, theirs in ((encoder.sounds.net, version_5.sounds.net), (encoder.router, version_5.router)):
        assert all(torch.equal(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))
    rng = np.random.default_rng(6)
    windows = [(0.1 * rng.standard_normal(16000)).astype(np.float32), np.zeros(16000, np.float32)]
    np.testing.assert_array_equal(encoder.encode(windows).codes, version_5.encode(windows).codes)
    np.testing.assert_array_equal(encoder.speech_probability(windows), version_5.speech_probability(windows))


def test_version_4_sends_generated_non_speech_it_never_saw_to_the_sounds_half(encoder) -> None:
    from app.training.synthesis.non_speech import VARIED_KINDS, varied_non_speech

    # the router trained on seed 0's windows; these are new draws of every kind (sweeps, clicks, harmonic tones...)
    windows = varied_non_speech(20 * len(VARIED_KINDS), 16000, 16000, seed=12345)
    bits = np.unpackbits(encoder.encode(windows).codes, axis=1, bitorder="little")
    assert bits[:, :SPEECH_HALF].any(axis=1).mean() <= 0.01
