"""Structural checks that catch truncated audio files the decoders would accept silently.

libsndfile and ffmpeg are lenient on purpose: a WAV whose data chunk is cut short, or an Ogg or
MP3 file cut in the middle of a page or frame, decodes without an error to fewer samples than
the file promised. For a retrieval index that is silent garbage (an item that is half missing),
so each check walks the container's framing and reports whether the last unit runs past the end
of the file. They read headers only, never audio, and return None when the framing cannot be
followed (unknown layout, junk between frames): "can't tell" must never refuse a valid file.
"""

from __future__ import annotations

import struct

# RIFF data-chunk sizes that mean "unknown length" (written by streaming encoders and pipes).
_WAV_UNKNOWN_SIZES = (0, 0xFFFFFFFF)

# MPEG audio bitrates in kbit/s, indexed by [version is MPEG-1][layer][bitrate index].
_MP3_BITRATES = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}
# Sample rates by version bits (0 = MPEG-2.5, 2 = MPEG-2, 3 = MPEG-1) and rate index.
_MP3_RATES = {0: (11025, 12000, 8000), 2: (22050, 24000, 16000), 3: (44100, 48000, 32000)}
# Tags that may follow the last frame; reaching one means the frames ended cleanly.
_MP3_TRAILERS = (b"TAG", b"APETAGEX", b"LYRICS")


def wav_missing_bytes(data: bytes) -> int | None:
    """How many bytes of a RIFF/WAVE data chunk are missing from the end of the file.

    Args:
        data: A whole RIFF/WAVE file.

    Returns:
        0 when the data chunk is complete, a positive count when the header declares more
        sample bytes than the file holds, None when there is no readable data chunk or its
        size is the streaming placeholder (0 or 0xFFFFFFFF).
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        if chunk_id == b"data":
            if size in _WAV_UNKNOWN_SIZES:
                return None
            return max(0, pos + 8 + size - len(data))
        pos += 8 + size + (size & 1)  # chunks are padded to an even length
    return None


def ogg_is_truncated(data: bytes) -> bool | None:
    """Whether the last Ogg page runs past the end of the file.

    Args:
        data: A whole Ogg file (Vorbis, Opus, FLAC or Theora inside).

    Returns:
        True when a page header or body is cut short, False when every page is complete,
        None when the bytes are not a sequence of Ogg pages.
    """
    pos, end = 0, len(data)
    while pos < end:
        if data[pos : pos + 4] != b"OggS":
            return None if pos == 0 else False  # trailing junk after complete pages
        if end - pos < 27:
            return True
        segments = data[pos + 26]
        if end - pos < 27 + segments:
            return True
        page_end = pos + 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        if page_end > end:
            return True
        pos = page_end
    return False


def mp3_is_truncated(data: bytes) -> bool | None:
    """Whether the last MPEG audio frame runs past the end of the file.

    Skips leading ID3v2 tags, then follows frame headers to the end. A truncation exactly at a
    frame boundary is indistinguishable from a shorter file here; the Xing/Info frame count
    (compared against the decoded length by the caller) catches that case when present.

    Args:
        data: A whole MP3 file.

    Returns:
        True when a frame is cut short, False when the frames end cleanly (at EOF or at a
        trailing tag), None when no frame header is found where one should be.
    """
    pos, end = _skip_id3v2(data), len(data)
    frames = 0
    while pos < end:
        if data.startswith(_MP3_TRAILERS, pos):
            return False
        if end - pos < 4:
            return True if frames else None
        length = _mp3_frame_length(data[pos : pos + 4])
        if length is None:
            # Junk after at least one frame (padding, an unknown tag): the frames we could follow
            # were complete, which is all we can say.
            return False if frames else None
        if pos + length > end:
            return True
        pos += length
        frames += 1
    return False if frames else None


def mp3_has_frame_count(data: bytes) -> bool:
    """Whether the first frame carries a Xing/Info or VBRI header (an exact length).

    Without one, decoders estimate an MP3's length from its bitrate, so comparing that estimate
    with the decoded length would refuse valid VBR files.

    Args:
        data: A whole MP3 file.

    Returns:
        True when a frame-count header is present.
    """
    start = _skip_id3v2(data)
    first_frame = data[start : start + 200]
    return any(tag in first_frame for tag in (b"Xing", b"Info", b"VBRI"))


def _skip_id3v2(data: bytes) -> int:
    pos = 0
    # Several ID3v2 tags may be stacked; each size is a 28-bit "syncsafe" integer.
    while data.startswith(b"ID3", pos) and len(data) >= pos + 10:
        size_bytes = data[pos + 6 : pos + 10]
        size = 0
        for byte in size_bytes:
            size = (size << 7) | (byte & 0x7F)
        footer = 10 if data[pos + 5] & 0x10 else 0
        pos += 10 + size + footer
    return pos


def _mp3_frame_length(header: bytes) -> int | None:
    """Byte length of the MPEG audio frame starting with ``header``, None if it is not one."""
    if header[0] != 0xFF or header[1] & 0xE0 != 0xE0:
        return None
    version = (header[1] >> 3) & 0x3
    layer_bits = (header[1] >> 1) & 0x3
    bitrate_index = header[2] >> 4
    rate_index = (header[2] >> 2) & 0x3
    if version == 1 or layer_bits == 0 or bitrate_index in (0, 0xF) or rate_index == 3:
        return None  # reserved values, or free-format bitrate whose length we cannot compute
    layer = 4 - layer_bits  # layer bits 3, 2, 1 mean layers I, II, III
    mpeg1 = version == 3
    bitrate = _MP3_BITRATES[(mpeg1, layer)][bitrate_index] * 1000
    rate = _MP3_RATES[version][rate_index]
    padding = (header[2] >> 1) & 0x1
    if layer == 1:
        return (12 * bitrate // rate + padding) * 4
    if layer == 3 and not mpeg1:
        return 72 * bitrate // rate + padding
    return 144 * bitrate // rate + padding


def iso_bmff_is_truncated(data: bytes) -> bool | None:
    """Whether the last top-level box of an MP4/M4A/MOV file runs past the end of the file.

    ffmpeg writes the ``moov`` index at the end unless told otherwise, so a cut file may still
    open with some of its tracks missing; a short ``mdat`` decodes to fewer samples silently.

    Args:
        data: A whole ISO base media file.

    Returns:
        True when a box is cut short, False when the boxes tile the file, None when the first
        bytes are not a box header.
    """
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 8:
            return True
        (size,) = struct.unpack_from(">I", data, pos)
        header = 8
        if size == 1:  # 64-bit "largesize" follows the type
            if end - pos < 16:
                return True
            (size,) = struct.unpack_from(">Q", data, pos + 8)
            header = 16
        elif size == 0:
            return False  # the box extends to the end of the file by definition
        if size < header:
            return None if pos == 0 else False  # not box framing: can't tell
        if pos + size > end:
            return True
        pos += size
    return False


def matroska_is_truncated(data: bytes) -> bool | None:
    """Whether a top-level EBML element (the Segment) of a WebM/Matroska file runs past the end.

    A seekable writer fills in the Segment's size when it finishes; a live writer (a browser's
    MediaRecorder) leaves it "unknown", and such a file cannot be checked this way.

    Args:
        data: A whole WebM/Matroska file.

    Returns:
        True when an element is cut short, False when the elements tile the file, None when the
        framing cannot be followed or a size is unknown.
    """
    pos, end = 0, len(data)
    while pos < end:
        id_length = _ebml_vint_length(data, pos)
        if id_length is None:
            return None if pos == 0 else False
        size_pos = pos + id_length
        size_length = _ebml_vint_length(data, size_pos)
        if size_length is None:
            return True if size_pos >= end else None
        if size_pos + size_length > end:
            return True
        value = data[size_pos] & (0xFF >> size_length)
        unknown = value == (0xFF >> size_length)
        for byte in data[size_pos + 1 : size_pos + size_length]:
            value = (value << 8) | byte
            unknown = unknown and byte == 0xFF
        if unknown:
            return None
        element_end = size_pos + size_length + value
        if element_end > end:
            return True
        pos = element_end
    return False


def _ebml_vint_length(data: bytes, pos: int) -> int | None:
    """Byte length of the EBML variable-length integer at ``pos`` (1-8), None if invalid or at EOF."""
    if pos >= len(data) or data[pos] == 0:
        return None
    return 9 - data[pos].bit_length()
