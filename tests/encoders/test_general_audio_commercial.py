"""The shipped default audio encoder, `general-audio-commercial` (README, Licences; reports/audio/commercial_view.md).

Version 1: version 6's speech branch beside a sounds branch and router that never heard ESC-50. Version 2 (the default
since round 8 of issue 37) adds the frozen front-end's view to version 1's speech half at a third of its weight
(128 bits), and must stay version 1 wherever the view is not involved.

What makes it usable commercially is what trained it, so the tests hold the checkpoints' own records to that:
the config says ESC-50 was left out of every step, the card carries no non-commercial term, and the speech
head is version 6's, bit for bit, on a speech window both route to speech."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.encoders.registry import create_encoder, discover
from app.encoders.traced import TracedStep
from app.settings import EncoderSettings
from tests.encoders.eager_answers import eager_encode
from tests.encoders.view_checks import assert_only_the_view_differs
from tests.training.tiny_corpora import voice_and_hiss


@pytest.fixture(scope="module")
def trio():
    specs = discover()
    return (create_encoder("general-audio-commercial", specs), create_encoder("general-audio-commercial@1", specs),
            create_encoder("general-audio@6", specs))


def test_it_is_the_default_and_its_record_says_no_step_heard_esc50(trio) -> None:
    commercial, v1, v6 = trio
    specs = discover()
    # issue 37: the default must be usable commercially; the ESC-50 twin (`general-audio`) is a named variant
    assert EncoderSettings().default_audio == commercial.name == "general-audio-commercial"
    assert {"general-audio-commercial@1", "general-audio-commercial@2"} <= set(specs)
    for encoder in (commercial, v1):
        directory = Path(specs[f"general-audio-commercial@{encoder.version}"].source)
        config = encoder.config
        assert config["without"] == "esc" and config["sounds_without_labels"] == "whiten"
        assert config["router_negatives"] == "varied"
        # the sounds branch was fitted without labels, on synthetic words and generated non-speech only
        sounds = json.loads((directory / "sounds" / "config.json").read_text())
        assert set(sounds["training"]["unlabelled_windows"]) == {"generated non-speech", "synthetic English words"}
        card = (directory / "DATA.md").read_text()
        assert "ESC-50" in card and "no non-commercial term" in card  # named only to say it was not used
        assert "CC BY-NC" not in card and not (directory / "sounds" / "DATA.md").exists()
    assert (commercial.version, v1.version) == ("2", "1")
    # what GET /v1/encoders lists as each one's licence; the ESC-50 twin says it is non-commercial
    assert commercial.config["licence"].startswith("commercial use allowed") and "NC" not in commercial.config["licence"]
    assert v1.config["licence"] == commercial.config["licence"]
    assert v6.config["licence"].startswith("non-commercial") and "ESC-50" in v6.config["licence"]
    assert (v1.dim, v1.bits) == (v6.dim, v6.bits)
    # version 2's view: version 1's speech half plus the front-end's 96-d centred mean frame, 128 bits of the code
    views = commercial.config["speech_views"]
    assert views["frontend_bits"] == 128 and views["from"] == {"name": "general-audio-commercial", "version": "1"}
    assert "ASC training speakers" in views["fitted_on"] and "FSDD george/lucas" in views["fitted_on"]
    assert (commercial.dim, commercial.bits) == (v1.dim + 96, v1.bits)


def test_its_speech_head_is_version_6s(trio) -> None:
    _, v1, v6 = trio
    voice = voice_and_hiss()[:1]
    assert v1.speech_probability(voice)[0] > 0.5 and v6.speech_probability(voice)[0] > 0.5
    a, b = v1.encode(voice), v6.encode(voice)
    half = v6.speech.bits
    bits_a, bits_b = (np.unpackbits(e.codes, axis=1, bitorder="little") for e in (a, b))
    assert np.array_equal(bits_a[:, :half], bits_b[:, :half])
    # the float half points the same way; its length follows each router's confidence
    fa, fb = (e.floats[:, :v6.speech.dim] for e in (a, b))
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    np.testing.assert_allclose(unit(fa), unit(fb), atol=1e-5)


def test_version_2_is_version_1_where_the_view_is_not_involved(trio) -> None:
    commercial, v1, _ = trio
    assert_only_the_view_differs(commercial, v1, view_bits=128)


def test_its_router_is_its_own(trio) -> None:
    commercial, _, v6 = trio
    waves = voice_and_hiss()
    assert not np.array_equal(commercial.speech_probability(waves), v6.speech_probability(waves))


@pytest.mark.parametrize("which", [0, 1])
def test_it_runs_traced_on_cpu_with_the_eager_answers(trio, which) -> None:
    encoder = trio[which]
    waves = voice_and_hiss() + [np.zeros(8000, np.float32)]
    traced = encoder.encode(waves)
    assert isinstance(encoder.steps.built.frames, TracedStep) and isinstance(encoder.steps.built.head, TracedStep)
    [eager] = eager_encode(encoder, waves)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    np.testing.assert_allclose(traced.floats, eager.floats, atol=1e-6)
