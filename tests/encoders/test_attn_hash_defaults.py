"""The committed default checkpoints load through the registry and give valid, stable embeddings."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders.base import check_embeddings
from app.encoders.registry import create_encoder, discover
from app.settings import EncoderSettings

DEFAULTS = {"speech-attn-hash": (8000, 1.0, 0.5), "sounds-attn-hash": (16000, 2.0, 1.0), "sounds-texture": (16000, 2.0, 1.0)}


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_default_checkpoint_loads_and_embeds(name: str) -> None:
    specs = discover()
    assert name in specs and specs[name].modality == "audio"
    encoder = create_encoder(name, specs)
    rate, window_s, hop_s = DEFAULTS[name]
    assert (encoder.sample_rate, encoder.default_window_s, encoder.default_hop_s) == (rate, window_s, hop_s)
    rng = np.random.default_rng(0)
    t = np.arange(int(window_s * rate)) / rate
    waves = [
        (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32),
        (0.05 * rng.standard_normal(t.size)).astype(np.float32),
        (0.3 * np.sin(2 * np.pi * 440 * t[: rate // 4])).astype(np.float32),  # a short query: zero-padded
    ]
    emb = check_embeddings(encoder.encode(waves), n=3, dim=encoder.dim, bits=encoder.bits)
    np.testing.assert_allclose(np.linalg.norm(emb.floats, axis=1), 1.0, rtol=1e-5)
    again = create_encoder(name, specs).encode(waves)
    np.testing.assert_array_equal(emb.codes, again.codes)  # eval mode: no dropout, no batch statistics
    np.testing.assert_allclose(emb.floats, again.floats, atol=1e-6)
    # a window's embedding does not depend on what else is in its batch (batch norm uses running stats)
    alone = encoder.encode(waves[1:2])
    np.testing.assert_allclose(alone.floats[0], emb.floats[1], atol=1e-5)


def test_service_default_audio_encoder_is_the_general_checkpoint() -> None:
    assert EncoderSettings().default_audio == "general-audio-commercial"
    assert EncoderSettings().default_audio in discover()


def test_sounds_texture_puts_like_with_like() -> None:
    """Two noises are nearer each other than a noise is to a tone, in float and in Hamming."""
    encoder = create_encoder("sounds-texture", discover())
    rng = np.random.default_rng(1)
    t = np.arange(2 * 16000) / 16000
    waves = [(0.1 * rng.standard_normal(t.size)).astype(np.float32), (0.2 * rng.standard_normal(t.size)).astype(np.float32),
             (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), (0.3 * np.sin(2 * np.pi * 470 * t)).astype(np.float32)]
    emb = encoder.encode(waves)
    sim = emb.floats @ emb.floats.T
    assert sim[0, 1] > sim[0, 2] and sim[2, 3] > sim[2, 0]
    bits = np.unpackbits(emb.codes, axis=1, bitorder="little").astype(int)
    hamming = (bits[:, None, :] != bits[None, :, :]).sum(2)
    assert hamming[0, 1] < hamming[0, 2] and hamming[2, 3] < hamming[2, 0]
