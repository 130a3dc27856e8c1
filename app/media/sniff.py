"""Identify an upload's modality and container from its first bytes.

The API uses this to refuse a wrong-modality upload with a message that says what the file is
("this collection holds audio; 'x.png' is an image"), and the decoders use it to tell "not a
format we know" (415) apart from "a format we know, but broken" (422). Only magic bytes are
read: sniffing never decodes, so it is cheap and safe on hostile input.
"""

from __future__ import annotations

import re
from typing import Literal, NamedTuple

Modality = Literal["audio", "image", "video"]


class Sniffed(NamedTuple):
    """What the first bytes of a file say it is."""

    modality: Modality
    format: str  # human-readable container name, used in error messages


# ISO base media (MP4/MOV/HEIF) major brands that are not video. Anything else with an ftyp
# box is reported as video: its audio track (if any) is still decodable by decode_audio.
_AUDIO_BRANDS = {b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "}
_IMAGE_BRANDS = {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif", b"avis"}

# Matroska/WebM CodecID elements (ID 0x86, one-byte size) naming a video or an audio codec.
# Searching for them avoids a full EBML parse: the Tracks element sits near the start.
_MKV_VIDEO_CODEC = re.compile(rb"\x86[\x81-\xff]V_")
_MKV_AUDIO_CODEC = re.compile(rb"\x86[\x81-\xff]A_")
_MKV_SCAN_BYTES = 64 * 1024


def sniff(data: bytes) -> Sniffed | None:
    """Identify ``data`` from its magic bytes.

    Args:
        data: The whole file, or at least its first 64 KB.

    Returns:
        The modality and container name, or None when the bytes match no known format.
    """
    head = data[:16]
    if head.startswith(b"\xff\xd8\xff"):
        return Sniffed("image", "JPEG")
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return Sniffed("image", "PNG")
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return Sniffed("image", "GIF")
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return Sniffed("image", "TIFF")
    if head.startswith(b"BM") and len(data) >= 26 and data[6:10] == b"\x00\x00\x00\x00":
        return Sniffed("image", "BMP")  # reserved bytes must be zero: "BM" alone is too weak
    if head.startswith(b"RIFF") and len(head) >= 12:
        kind = head[8:12]
        if kind == b"WAVE":
            return Sniffed("audio", "WAV")
        if kind == b"WEBP":
            return Sniffed("image", "WebP")
        if kind == b"AVI ":
            return Sniffed("video", "AVI")
    if head.startswith((b"RF64", b"BW64")):
        return Sniffed("audio", "WAV")
    if head.startswith(b"fLaC"):
        return Sniffed("audio", "FLAC")
    if head.startswith(b"OggS"):
        return _sniff_ogg(data)
    if head.startswith(b"ID3"):
        return Sniffed("audio", "MP3")
    if head.startswith(b"FORM") and head[8:12] in (b"AIFF", b"AIFC"):
        return Sniffed("audio", "AIFF")
    if head.startswith(b".snd"):
        return Sniffed("audio", "AU")
    if head.startswith(b"caff"):
        return Sniffed("audio", "CAF")
    if head.startswith(b"#!AMR"):
        return Sniffed("audio", "AMR")
    if head[4:8] == b"ftyp":
        return _sniff_iso_bmff(head[8:12])
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return _sniff_matroska(data)
    if head.startswith(b"FLV"):
        return Sniffed("video", "FLV")
    if head.startswith(b"\x00\x00\x01\xba"):
        return Sniffed("video", "MPEG-PS")
    if len(data) > 376 and data[0] == data[188] == data[376] == 0x47:
        return Sniffed("video", "MPEG-TS")
    return _sniff_mpeg_audio(head)


def sniff_modality(data: bytes) -> Modality | None:
    """The modality of ``data`` ("audio", "image" or "video"), or None when unknown.

    Args:
        data: The whole file, or at least its first 64 KB.

    Returns:
        "audio", "image" or "video" from the magic bytes; None for unrecognised content.
    """
    sniffed = sniff(data)
    return sniffed.modality if sniffed else None


def _sniff_ogg(data: bytes) -> Sniffed:
    # The first page carries the first codec header packet right after the segment table.
    first_page = data[:512]
    if b"\x80theora" in first_page:
        return Sniffed("video", "Ogg/Theora")
    if b"OpusHead" in first_page:
        return Sniffed("audio", "Ogg/Opus")
    if b"\x7fFLAC" in first_page:
        return Sniffed("audio", "Ogg/FLAC")
    return Sniffed("audio", "Ogg/Vorbis")


def _sniff_iso_bmff(brand: bytes) -> Sniffed:
    if brand in _AUDIO_BRANDS:
        return Sniffed("audio", "M4A")
    if brand in _IMAGE_BRANDS:
        return Sniffed("image", "AVIF" if brand.startswith(b"avi") else "HEIF")
    return Sniffed("video", "MP4")


def _sniff_matroska(data: bytes) -> Sniffed:
    head = data[:_MKV_SCAN_BYTES]
    name = "WebM" if b"webm" in head[:64] else "Matroska"
    if _MKV_VIDEO_CODEC.search(head):
        return Sniffed("video", name)
    if _MKV_AUDIO_CODEC.search(head):
        return Sniffed("audio", name)
    return Sniffed("video", name)  # unknown tracks: video is the safe, less specific claim


def _sniff_mpeg_audio(head: bytes) -> Sniffed | None:
    """MP3 without an ID3 tag, or raw ADTS AAC: an MPEG audio frame sync at byte 0."""
    if len(head) < 4 or head[0] != 0xFF or head[1] & 0xE0 != 0xE0:
        return None
    layer = (head[1] >> 1) & 0x3
    if layer == 0:
        # Layer bits 00 are reserved in MPEG audio but mean ADTS AAC when the sync is 12 bits.
        return Sniffed("audio", "AAC") if head[1] & 0xF6 == 0xF0 else None
    bitrate_index = head[2] >> 4
    rate_index = (head[2] >> 2) & 0x3
    version = (head[1] >> 3) & 0x3
    if version == 1 or bitrate_index == 0xF or rate_index == 0x3:
        return None  # reserved values: random bytes, not a frame header
    return Sniffed("audio", "MP3")
