"""The shipped opt-in `general-audio-broad`: version 6 of general-audio plus the front-end view (reports/audio/version7.md).

It must stay exactly version 6 where the view is not involved (the same head bits, the same sounds half, the
same routing) and run traced on CPU with the eager answers, like every shipped encoder."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders.registry import create_encoder, discover
from app.encoders.traced import TracedStep
from tests.encoders.eager_answers import eager_encode
from tests.encoders.view_checks import assert_only_the_view_differs
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
    assert_only_the_view_differs(broad, v6, view_bits=256)


def test_it_runs_traced_on_cpu_with_the_eager_answers(pair) -> None:
    broad, _ = pair
    waves = voice_and_hiss() + [np.zeros(8000, np.float32)]
    traced = broad.encode(waves)
    assert isinstance(broad.steps.built.frames, TracedStep) and isinstance(broad.steps.built.head, TracedStep)
    [eager] = eager_encode(broad, waves)
    np.testing.assert_array_equal(traced.codes, eager.codes)
    np.testing.assert_allclose(traced.floats, eager.floats, atol=1e-6)
