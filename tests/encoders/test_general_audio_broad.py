"""The shipped opt-in `general-audio-broad`: version 6 of general-audio plus the front-end view (reports/audio/version7.md).

It must stay exactly version 6 where the view is not involved (the same head bits, the same sounds half, the
same routing) and run traced on CPU with the eager answers, like every shipped encoder."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders.registry import create_encoder, discover
from app.encoders.traced import TracedStep
from tests.encoders.eager_answers import eager_encode
from tests.training.tiny_corpora import voice_and_hiss


@pytest.fixture(scope="module")
def pair():
    specs = discover()
    return create_encoder("general-audio-broad", specs), create_encoder("general-audio@6", specs)


def test_it_is_listed_with_its_version_and_the_view_in_its_config(pair) -> None:
    broad, v6 = pair
    assert "general-audio-broad@1" in discover()
    assert broad.config["speech_views"]["frontend_bits"] == 256 and broad.config["speech_views"]["from"]["version"] == "6"
    assert (broad.dim, broad.bits) == (v6.dim + 96, v6.bits)


def test_it_is_version_6_where_the_view_is_not_involved(pair) -> None:
    broad, v6 = pair
    waves = voice_and_hiss()
    assert np.array_equal(broad.speech_probability(waves), v6.speech_probability(waves))
    a, b = broad.encode(waves), v6.encode(waves)
    bits_a, bits_b = (np.unpackbits(e.codes, axis=1, bitorder="little") for e in (a, b))
    half = v6.speech.bits
    assert np.array_equal(bits_a[:, :half], bits_b[:, :half])  # the head's bits, or the sound window's filler
    assert np.array_equal(bits_a[1], bits_b[1])  # the hiss: a sound window, the view plays no part
    assert bits_a[0, half:half + 256].any() and not bits_b[0, half:].any()  # the speech window: the view's bits
    np.testing.assert_allclose(a.floats[1, -v6.sounds.dim:], b.floats[1, -v6.sounds.dim:], atol=1e-5)


def test_it_runs_traced_on_cpu_with_the_eager_answers(pair) -> None:
    broad, _ = pair
    waves = voice_and_hiss() + [np.zeros(8000, np.float32)]
    traced = broad.encode(waves)
    assert isinstance(broad.steps.built.speech, TracedStep)
    [eager] = eager_encode(broad, waves)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    np.testing.assert_allclose(traced.floats, eager.floats, atol=1e-6)
