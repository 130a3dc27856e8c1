"""sniff_modality: magic bytes of every accepted format, and of the ones we name when refusing."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from PIL import Image

from app.media.sniff import sniff, sniff_modality


def image_bytes(fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (10, 20, 30)).save(buffer, fmt)
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("fmt", "modality", "name"),
    [
        ("wav", "audio", "WAV"),
        ("flac", "audio", "FLAC"),
        ("ogg", "audio", "Ogg/Vorbis"),
        ("opus", "audio", "Ogg/Opus"),
        ("mp3", "audio", "MP3"),
        ("m4a", "audio", "M4A"),
        ("webm", "audio", "WebM"),
        ("mp4", "video", "MP4"),
    ],
)
def test_audio_and_video_containers(encoded: dict[str, bytes], fmt: str, modality: str, name: str) -> None:
    assert sniff(encoded[fmt]) == (modality, name)


@pytest.mark.parametrize(
    ("fmt", "name"), [("JPEG", "JPEG"), ("PNG", "PNG"), ("WEBP", "WebP"), ("GIF", "GIF"), ("BMP", "BMP"), ("TIFF", "TIFF")]
)
def test_images(fmt: str, name: str) -> None:
    assert sniff(image_bytes(fmt)) == ("image", name)
    assert sniff_modality(image_bytes(fmt)) == "image"


def test_webm_with_a_video_track_is_video(ffmpeg: Callable[..., bytes]) -> None:
    data = ffmpeg("webm", "-f", "lavfi", "-i", "testsrc=size=32x24:rate=5:duration=0.4", "-c:v", "libvpx", "-b:v", "50k")
    assert sniff_modality(data) == "video"


def test_mp3_without_id3_tag_is_found_by_its_frame_sync(ffmpeg: Callable[..., bytes]) -> None:
    data = ffmpeg("mp3", "-i", "{wav}", "-c:a", "libmp3lame", "-id3v2_version", "0", "-write_xing", "0")
    assert data[:3] != b"ID3"
    assert sniff(data) == ("audio", "MP3")


def test_heic_brand_is_an_image() -> None:
    assert sniff(b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00") == ("image", "HEIF")


@pytest.mark.parametrize("data", [b"", b"hello world", b"\xff\xff\xff\xff", b"{\"items\": []}", b"\x00" * 1000])
def test_unknown_content_is_none(data: bytes) -> None:
    assert sniff_modality(data) is None
