"""decode_audio: every accepted container, downmix, resampling, and each bad-input case."""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest
import soundfile as sf

from app.errors import InvalidInput, PayloadTooLarge, UnsupportedMedia
from app.media.audio import decode_audio
from tests.media.conftest import TONE_HZ, encode_soundfile, peak_hz, sine

RATE = 16000


# --- formats ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "mp3", "m4a", "opus", "webm", "mp4"])
def test_each_format_decodes_to_mono_at_target_rate(encoded: dict[str, bytes], fmt: str) -> None:
    wave = decode_audio(encoded[fmt], target_rate=RATE, filename=f"tone.{fmt}")

    assert wave.dtype == np.float32 and wave.ndim == 1
    # 1 s of audio. Lossy codecs may keep up to ~25 ms of encoder priming (AAC: 1024 samples
    # at 44.1 kHz), hence the 30 ms tolerance; a wrong rate would be off by >= 50%.
    assert abs(wave.size - RATE) <= 0.03 * RATE
    assert np.abs(wave).max() <= 1.0
    # FFT bins are 1 Hz wide for 1 s; lossy coding must not move the tone.
    assert abs(peak_hz(wave, RATE) - TONE_HZ) <= 2.0
    # The 0.5-amplitude tone survives (not silence, not clipped noise).
    assert 0.3 < np.sqrt(np.mean(wave[1000:-1000] ** 2)) < 0.45


def test_stereo_is_downmixed_by_averaging_channels() -> None:
    frames = np.stack([np.full(RATE, 0.5), np.full(RATE, 0.1)], axis=1).astype(np.float32)
    data = encode_soundfile(frames, RATE, "WAV", "FLOAT")

    wave = decode_audio(data, target_rate=RATE)

    assert wave.size == RATE  # same rate: no resampling
    np.testing.assert_allclose(wave, 0.3, atol=1e-6)


def test_opposite_channels_cancel() -> None:
    tone = sine(TONE_HZ, 0.5, RATE)[:, 0]
    data = encode_soundfile(np.stack([tone, -tone], axis=1), RATE, "WAV", "FLOAT")

    np.testing.assert_allclose(decode_audio(data, target_rate=RATE), 0.0, atol=1e-6)


@pytest.mark.parametrize("source_rate", [8000, 44100])
def test_resampling_preserves_length_and_frequency(source_rate: int) -> None:
    data = encode_soundfile(sine(1000.0, 1.5, source_rate), source_rate, "WAV", "PCM_16")

    wave = decode_audio(data, target_rate=RATE)

    assert wave.size == int(1.5 * RATE)
    # 1.5 s gives 0.67 Hz bins; soxr's HQ filter keeps a 1 kHz tone exactly where it was.
    assert abs(peak_hz(wave, RATE) - 1000.0) <= 1.0


def test_float_wav_beyond_full_scale_is_clipped() -> None:
    data = encode_soundfile(np.full((RATE, 1), 3.0, dtype=np.float32), RATE, "WAV", "FLOAT")

    wave = decode_audio(data, target_rate=RATE)

    assert wave.max() == 1.0


def test_streamed_wav_with_unknown_length_is_not_called_truncated() -> None:
    # Encoders writing to a pipe cannot seek back, so they leave 0xFFFFFFFF as the sizes.
    data = bytearray(encode_soundfile(sine(TONE_HZ, 0.5, RATE), RATE, "WAV", "PCM_16"))
    data[4:8] = struct.pack("<I", 0xFFFFFFFF)
    data[40:44] = struct.pack("<I", 0xFFFFFFFF)
    assert data[36:40] == b"data"

    assert decode_audio(bytes(data), target_rate=RATE).size == RATE // 2


def test_browser_style_webm_without_duration_decodes(ffmpeg: Callable[..., bytes]) -> None:
    # MediaRecorder writes WebM live: no Duration element, so no declared length to check.
    data = ffmpeg("webm", "-i", "{wav}", "-c:a", "libopus", "-live", "1", "-cluster_time_limit", "200")

    assert abs(decode_audio(data, target_rate=RATE).size - RATE) <= 0.03 * RATE


def test_mp3_without_xing_header_decodes(ffmpeg: Callable[..., bytes]) -> None:
    data = ffmpeg("mp3", "-i", "{wav}", "-c:a", "libmp3lame", "-write_xing", "0")
    assert b"Xing" not in data[:2000] and b"Info" not in data[:2000]

    assert abs(decode_audio(data, target_rate=RATE).size - RATE) <= 0.1 * RATE


# --- bad input -----------------------------------------------------------------------------


def test_empty_file_is_invalid() -> None:
    with pytest.raises(InvalidInput, match=r"'clip.wav' is empty"):
        decode_audio(b"", target_rate=RATE, filename="clip.wav")


def test_text_is_unsupported_media() -> None:
    with pytest.raises(UnsupportedMedia, match=r"'notes.txt' is not an audio format.*upload WAV"):
        decode_audio(b"hello, this is not audio\n" * 50, target_rate=RATE, filename="notes.txt")


def test_random_bytes_are_unsupported_media() -> None:
    noise = np.random.default_rng(0).integers(0, 256, 20000, dtype=np.uint8).tobytes()
    with pytest.raises(UnsupportedMedia):
        decode_audio(b"\x00\x01" + noise, target_rate=RATE, filename="noise.bin")


def test_image_is_unsupported_and_named_as_image() -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 100
    with pytest.raises(UnsupportedMedia, match=r"'x.png' is an image \(PNG\), not audio"):
        decode_audio(png, target_rate=RATE, filename="x.png")


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "mp3", "m4a", "opus", "webm", "mp4"])
@pytest.mark.parametrize("keep", [0.3, 0.6, 0.95])
def test_truncated_file_is_invalid(encoded: dict[str, bytes], fmt: str, keep: float) -> None:
    data = encoded[fmt]
    with pytest.raises(InvalidInput, match=rf"'cut\.{fmt}'.*truncated"):
        decode_audio(data[: int(len(data) * keep)], target_rate=RATE, filename=f"cut.{fmt}")


def test_mp3_cut_at_a_frame_boundary_is_caught_by_its_frame_count(encoded: dict[str, bytes]) -> None:
    from app.media import _truncation

    data = encoded["mp3"]
    # Walk frames to a boundary near the middle so the frame walk alone sees a clean end.
    pos = _truncation._skip_id3v2(data)
    while pos < len(data) // 2:
        length = _truncation._mp3_frame_length(data[pos : pos + 4])
        assert length is not None
        pos += length
    assert _truncation.mp3_is_truncated(data[:pos]) is False

    with pytest.raises(InvalidInput, match=r"header promises 1.00 s"):
        decode_audio(data[:pos], target_rate=RATE, filename="cut.mp3")


def test_corrupt_flac_body_is_invalid(encoded: dict[str, bytes]) -> None:
    data = bytearray(encoded["flac"])
    rng = np.random.default_rng(1)
    data[200:] = rng.integers(0, 256, len(data) - 200, dtype=np.uint8).tobytes()
    with pytest.raises(InvalidInput, match=r"'bad.flac' looks like FLAC but could not be decoded"):
        decode_audio(bytes(data), target_rate=RATE, filename="bad.flac")


def test_wav_header_only_is_invalid(encoded: dict[str, bytes]) -> None:
    with pytest.raises(InvalidInput, match="'h.wav'"):
        decode_audio(encoded["wav"][:20], target_rate=RATE, filename="h.wav")


def test_zero_samples_is_invalid() -> None:
    data = encode_soundfile(np.zeros((0, 1), dtype=np.float32), RATE, "WAV", "PCM_16")
    with pytest.raises(InvalidInput, match=r"'silent.wav' decodes to no audio samples"):
        decode_audio(data, target_rate=RATE, filename="silent.wav")


def test_too_short_is_invalid() -> None:
    data = encode_soundfile(sine(TONE_HZ, 0.05, RATE), RATE, "WAV", "PCM_16")
    with pytest.raises(InvalidInput, match=r"0.050 s long; audio must be at least 0.1 s"):
        decode_audio(data, target_rate=RATE, filename="blip.wav")


def test_min_seconds_is_configurable() -> None:
    data = encode_soundfile(sine(TONE_HZ, 0.05, RATE), RATE, "WAV", "PCM_16")
    assert decode_audio(data, target_rate=RATE, min_seconds=0.01).size == 800


def test_too_long_is_refused_from_the_header_before_decoding(
    encoded: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_read(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header says too long: nothing should be decoded")

    monkeypatch.setattr(sf.SoundFile, "read", no_read)
    with pytest.raises(PayloadTooLarge, match=r"'long.flac' is 1.0 s long; the limit is 0.5 s"):
        decode_audio(encoded["flac"], target_rate=RATE, filename="long.flac", max_seconds=0.5)


def test_too_long_container_is_refused_before_decoding(
    encoded: dict[str, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    import app.media.audio as audio_module

    def no_decode(*args: object, **kwargs: object) -> None:
        raise AssertionError("the header says too long: nothing should be decoded")

    monkeypatch.setattr(audio_module.av, "AudioResampler", no_decode)
    with pytest.raises(PayloadTooLarge, match=r"the limit is 0.5 s"):
        decode_audio(encoded["m4a"], target_rate=RATE, filename="long.m4a", max_seconds=0.5)


def test_too_long_without_declared_length_stops_while_decoding(ffmpeg: Callable[..., bytes]) -> None:
    data = ffmpeg("webm", "-i", "{wav}", "-c:a", "libopus", "-live", "1")
    with pytest.raises(PayloadTooLarge, match=r"the limit is 0.5 s"):
        decode_audio(data, target_rate=RATE, filename="live.webm", max_seconds=0.5)


def test_video_without_audio_track_is_invalid(ffmpeg: Callable[..., bytes]) -> None:
    data = ffmpeg("mp4", "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:duration=1", "-c:v", "mpeg4")
    with pytest.raises(InvalidInput, match=r"'clip.mp4' is a video \(MP4\) with no audio track"):
        decode_audio(data, target_rate=RATE, filename="clip.mp4")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_samples_are_invalid(bad: float) -> None:
    frames = sine(TONE_HZ, 0.5, RATE)
    frames[100] = bad
    data = encode_soundfile(frames, RATE, "WAV", "FLOAT")
    with pytest.raises(InvalidInput, match=r"NaN or infinite samples"):
        decode_audio(data, target_rate=RATE, filename="nan.wav")


def test_non_positive_target_rate_is_a_programming_error(encoded: dict[str, bytes]) -> None:
    with pytest.raises(ValueError):
        decode_audio(encoded["wav"], target_rate=0)


def test_wav_with_metadata_chunks_is_walked_correctly(ffmpeg: Callable[..., bytes]) -> None:
    # ffmpeg writes a LIST/INFO chunk before "data"; the truncation check must skip it.
    data = ffmpeg("wav", "-i", "{wav}", "-metadata", "title=odd", "-c:a", "pcm_s16le")
    assert b"LIST" in data[:200]

    assert decode_audio(data, target_rate=RATE).size == RATE
    with pytest.raises(InvalidInput, match="truncated"):
        decode_audio(data[:-1], target_rate=RATE)
