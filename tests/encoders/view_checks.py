"""A checkpoint made by ``--views-from PLAIN --frontend-bits B`` must answer exactly as PLAIN wherever the front-end
view is not involved: shared by the shipped encoders that carry a view (general-audio-broad, general-audio-commercial)."""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.training.tiny_corpora import voice_and_hiss


def assert_only_the_view_differs(viewed: Any, plain: Any, view_bits: int) -> None:
    """Same routing, the same head bits, the hiss (a sound window) bit for bit; the speech window's view bits, and no
    other bit of the sounds half, in the ``view_bits`` after the head's."""
    waves = voice_and_hiss()  # one speech window, one hiss
    assert np.array_equal(viewed.speech_probability(waves), plain.speech_probability(waves))
    a, b = viewed.encode(waves), plain.encode(waves)
    bits_a, bits_b = (np.unpackbits(e.codes, axis=1, bitorder="little") for e in (a, b))
    half = plain.speech.bits
    assert np.array_equal(bits_a[:, :half], bits_b[:, :half])  # the head's bits, or the sound window's filler
    assert np.array_equal(bits_a[1], bits_b[1])  # the hiss: a sound window, the view plays no part
    assert bits_a[0, half:half + view_bits].any() and not bits_b[0, half:].any()  # the speech window: the view's bits
    assert not bits_a[0, half + view_bits:].any()  # and nothing else of the sounds half
    np.testing.assert_allclose(a.floats[1, -plain.sounds.dim:], b.floats[1, -plain.sounds.dim:], atol=1e-5)
