"""The WAV fast path gives the same samples as libsndfile, and steps aside for what it cannot read."""

from __future__ import annotations

import io
import struct

import numpy as np
import pytest
import soundfile as sf

from app.errors import InvalidInput, PayloadTooLarge
from app.media import audio
from app.media.audio import decode_audio
from app.media.wav import parse_pcm_wav, pcm_samples

# every uncompressed layout libsndfile writes: integer widths, float widths, and WAVEX
# (WAVE_FORMAT_EXTENSIBLE, which libsndfile uses for more than two channels)
LAYOUTS = [
    ("WAV", "PCM_U8"), ("WAV", "PCM_16"), ("WAV", "PCM_24"), ("WAV", "PCM_32"),
    ("WAV", "FLOAT"), ("WAV", "DOUBLE"),
    ("WAVEX", "PCM_16"), ("WAVEX", "PCM_24"), ("WAVEX", "FLOAT"),
]


def _noise(frames: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    # full scale, both rails and silence: the extremes are where a scaling error shows
    wave = rng.uniform(-1.0, 1.0, (frames, channels))
    wave[:5] = 1.0
    wave[5:10] = -1.0
    wave[10:20] = 0.0
    return wave


def _wav(wave: np.ndarray, rate: int, fmt: str, subtype: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


@pytest.mark.parametrize("fmt,subtype", LAYOUTS)
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_samples_equal_libsndfiles(fmt: str, subtype: str, channels: int) -> None:
    data = _wav(_noise(4001, channels, seed=channels), 16000, fmt, subtype)
    layout = parse_pcm_wav(data)
    assert layout is not None and layout.channels == channels and layout.rate == 16000
    expected = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)[0]

    got = pcm_samples(data, layout)

    assert got.dtype == np.float32 and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)  # bit for bit, not approximately


@pytest.mark.parametrize("rate,channels", [(16000, 1), (48000, 2), (8000, 1), (44100, 2)])
def test_decode_audio_is_unchanged_by_the_fast_path(monkeypatch: pytest.MonkeyPatch, rate: int, channels: int) -> None:
    """Whole decode (downmix, resampling, clipping) with and without the fast path."""
    data = _wav(0.8 * _noise(rate, channels, seed=rate), rate, "WAV", "PCM_16")
    fast = decode_audio(data, target_rate=8000)
    monkeypatch.setattr(audio, "_decode_wav_fast", lambda *args: None)
    general = decode_audio(data, target_rate=8000)

    np.testing.assert_array_equal(fast, general)


def test_the_fast_path_is_taken_for_pcm_wav(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("libsndfile was called for a PCM WAV")

    monkeypatch.setattr(audio, "_decode_soundfile", refuse)
    wave = decode_audio(_wav(_noise(16000, 1, 0), 16000, "WAV", "PCM_16"), target_rate=16000)
    assert wave.shape == (16000,)


def test_trailing_chunks_after_the_data_are_not_samples() -> None:
    data = _wav(_noise(1000, 1, 1), 16000, "WAV", "PCM_16")
    tail = b"LIST" + struct.pack("<I", 10) + b"INFOjunk\x00\x00"
    riff_size = struct.unpack_from("<I", data, 4)[0] + len(tail)
    with_tail = data[:4] + struct.pack("<I", riff_size) + data[8:] + tail

    layout = parse_pcm_wav(with_tail)

    assert layout is not None
    np.testing.assert_array_equal(pcm_samples(with_tail, layout), sf.read(io.BytesIO(data), dtype="float32", always_2d=True)[0])


@pytest.mark.parametrize("subtype", ["ULAW", "ALAW", "IMA_ADPCM", "MS_ADPCM"])
def test_compressed_wav_is_left_to_libsndfile(subtype: str) -> None:
    rate = 8000
    data = _wav(0.5 * _noise(rate, 1, 2), rate, "WAV", subtype)
    assert parse_pcm_wav(data) is None
    # and the general decoder still reads it
    assert decode_audio(data, target_rate=rate).size == pytest.approx(rate, abs=1100)


@pytest.mark.parametrize("data", [
    b"", b"RIFF", b"RIFF\x00\x00\x00\x00WAVE", b"RIFX\x24\x00\x00\x00WAVEfmt ",
    b"RIFF\x24\x00\x00\x00WAVEdata\x04\x00\x00\x00\x00\x00\x00\x00",  # data before fmt
])
def test_malformed_headers_are_not_claimed(data: bytes) -> None:
    assert parse_pcm_wav(data) is None


def test_streaming_placeholder_length_is_left_to_libsndfile() -> None:
    data = bytearray(_wav(_noise(1000, 1, 3), 16000, "WAV", "PCM_16"))
    at = data.index(b"data")
    data[at + 4 : at + 8] = b"\xff\xff\xff\xff"
    assert parse_pcm_wav(bytes(data)) is None


def test_limits_and_truncation_still_apply_on_the_fast_path() -> None:
    data = _wav(_noise(16000 * 3, 1, 4), 16000, "WAV", "PCM_16")
    with pytest.raises(PayloadTooLarge):
        decode_audio(data, target_rate=16000, max_seconds=2.0)
    with pytest.raises(InvalidInput, match="truncated"):
        decode_audio(data[: len(data) // 2], target_rate=16000)
    nan = _wav(np.full((1600, 1), np.nan), 16000, "WAV", "FLOAT")
    with pytest.raises(InvalidInput, match="NaN"):
        decode_audio(nan, target_rate=16000)
