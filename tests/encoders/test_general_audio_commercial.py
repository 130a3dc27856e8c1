"""The shipped default audio encoder, `general-audio-commercial`: version 6's speech branch beside a sounds branch and router that
never heard ESC-50 (README, Licences; reports/audio/generalisation.md).

What makes it usable commercially is what trained it, so the tests hold the checkpoint's own record to that:
its config says ESC-50 was left out of every step, its card carries no non-commercial term, and its speech
half is version 6's, bit for bit, on a speech window both route to speech."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.encoders.registry import create_encoder, discover
from app.settings import EncoderSettings
from app.encoders.traced import TracedStep
from tests.encoders.eager_answers import eager_encode
from tests.training.tiny_corpora import voice_and_hiss


@pytest.fixture(scope="module")
def pair():
    specs = discover()
    return create_encoder("general-audio-commercial", specs), create_encoder("general-audio@6", specs)


def test_it_is_the_default_and_its_record_says_no_step_heard_esc50(pair) -> None:
    commercial, v6 = pair
    specs = discover()
    # issue 37: the default must be usable commercially; the ESC-50 twin (`general-audio`) is a named variant
    assert EncoderSettings().default_audio == commercial.name == "general-audio-commercial"
    assert "general-audio-commercial@1" in specs
    directory = Path(specs["general-audio-commercial"].source)
    config = commercial.config
    assert config["without"] == "esc" and config["sounds_without_labels"] == "whiten"
    assert config["router_negatives"] == "varied"
    # the sounds branch was fitted without labels, on synthetic words and generated non-speech only
    sounds = json.loads((directory / "sounds" / "config.json").read_text())
    assert set(sounds["training"]["unlabelled_windows"]) == {"generated non-speech", "synthetic English words"}
    card = (directory / "DATA.md").read_text()
    assert "ESC-50" in card and "no non-commercial term" in card  # named only to say it was not used
    assert "CC BY-NC" not in card and not (directory / "sounds" / "DATA.md").exists()
    assert (commercial.dim, commercial.bits) == (v6.dim, v6.bits)


def test_its_speech_half_is_version_6s(pair) -> None:
    commercial, v6 = pair
    voice = voice_and_hiss()[:1]
    assert commercial.speech_probability(voice)[0] > 0.5 and v6.speech_probability(voice)[0] > 0.5
    a, b = commercial.encode(voice), v6.encode(voice)
    half = v6.speech.bits
    bits_a, bits_b = (np.unpackbits(e.codes, axis=1, bitorder="little") for e in (a, b))
    assert np.array_equal(bits_a[:, :half], bits_b[:, :half])
    # the float half points the same way; its length follows each router's confidence
    fa, fb = (e.floats[:, :v6.speech.dim] for e in (a, b))
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(unit(fa), unit(fb), atol=1e-5)


def test_its_router_is_its_own(pair) -> None:
    commercial, v6 = pair
    waves = voice_and_hiss()
    assert not np.array_equal(commercial.speech_probability(waves), v6.speech_probability(waves))


def test_it_runs_traced_on_cpu_with_the_eager_answers(pair) -> None:
    commercial, _ = pair
    waves = voice_and_hiss() + [np.zeros(8000, np.float32)]
    traced = commercial.encode(waves)
    assert isinstance(commercial.steps.built.speech, TracedStep)
    [eager] = eager_encode(commercial, waves)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    np.testing.assert_allclose(traced.floats, eager.floats, atol=1e-6)
