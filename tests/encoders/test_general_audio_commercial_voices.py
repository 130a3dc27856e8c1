"""The shipped opt-in `general-audio-commercial-voices`: the default's one command with `--head-synthetic made-up`
(reports/audio/commercial_view.md, version 4 and the rounds before it).

Its speech head also trained on espeak-ng made-up words in 30 languages, which is what helps on corpora no step heard
(the leave-one-corpus-out rows); everything else is the default's, byte for byte, and it stays as commercially usable."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from app.encoders.registry import create_encoder, discover
from tests.encoders.eager_answers import eager_encode
from tests.training.tiny_corpora import voice_and_hiss

NAME = "general-audio-commercial-voices"


@pytest.fixture(scope="module")
def pair():
    specs = discover()
    return create_encoder(NAME, specs), create_encoder("general-audio-commercial", specs)


def test_it_is_the_defaults_one_command_with_the_made_up_words(pair) -> None:
    voices, default = pair
    specs = discover()
    assert f"{NAME}@1" in specs and voices.version == "1"
    command = shlex.split(voices.config["reproduce"]["train"])
    assert command[:3] == ["recall", "train", "general-audio"] and "--speech-frontend" in command
    flag = {name: command[command.index(name) + 1] for name in ("--without", "--frontend-bits", "--head-synthetic")}
    assert flag == {"--without": "esc", "--frontend-bits": "128", "--head-synthetic": "made-up"}
    assert voices.config["without"] == "esc" and voices.config["licence"] == default.config["licence"]
    assert voices.config["licence"].startswith("commercial use allowed")
    new, old = (Path(specs[name].source) for name in (NAME, "general-audio-commercial"))
    for part in ("weights.safetensors", "sounds/weights.safetensors"):  # router, views and sounds: the default's
        assert (new / part).read_bytes() == (old / part).read_bytes(), part
    head = json.loads((new / "speech" / "config.json").read_text())
    assert [Path(m).parent.name for m in head["training"]["extra_manifests"]][-1] == "pseudo"
    card = (new / "DATA.md").read_text()
    assert "made-up words in 30 languages" in card and "CC BY-NC" not in card and "no non-commercial term" in card
    assert (voices.dim, voices.bits) == (default.dim, default.bits)


def test_only_its_speech_head_differs_from_the_default(pair) -> None:
    voices, default = pair
    waves = voice_and_hiss()  # a speech window and a hiss
    assert np.array_equal(voices.speech_probability(waves), default.speech_probability(waves))  # the same router
    a, b = voices.encode(waves), default.encode(waves)
    np.testing.assert_array_equal(a.codes[1], b.codes[1])  # the hiss: the sounds half, the same bits
    assert not np.array_equal(a.codes[0], b.codes[0])  # the speech window: another head


def test_it_runs_traced_with_the_eager_answers(pair) -> None:
    voices, _ = pair
    waves = voice_and_hiss() + [np.zeros(8000, np.float32)]
    traced = voices.encode(waves)
    [eager] = eager_encode(voices, waves)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    np.testing.assert_allclose(traced.floats, eager.floats, atol=1e-6)
