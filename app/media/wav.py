"""Fast path for uncompressed WAV: the RIFF header parsed here, the samples viewed with numpy.

Most queries arrive as PCM WAV (a browser's recorder exported to WAV, a client's ``.wav``).
libsndfile reads them correctly, but through a virtual file object, a format probe and a
frame-by-frame copy that cost more than the samples themselves. Here the sample bytes are
converted in one vectorised step, with libsndfile's own scaling, so the samples are the same
bit for bit (``tests/media/test_wav_fast.py`` compares every supported layout with soundfile).

Anything unusual returns None and goes to the general decoder: compressed WAV (ADPCM, mu-law,
A-law, GSM), RF64/BW64, a streaming placeholder length, sample widths other than 8/16/24/32-bit
integer and 32/64-bit float, missing chunks, or a header that contradicts itself.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

_PCM = 1
_FLOAT = 3
_EXTENSIBLE = 0xFFFE
# A data chunk size that means "unknown length" (streaming writers); libsndfile guesses there.
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)
# libsndfile's integer -> float scaling: divide by 2^(bits-1), 24-bit read as the top of 32.
_INT_SCALE = {8: 1.0 / 0x80, 16: 1.0 / 0x8000, 24: 1.0 / 0x80000000, 32: 1.0 / 0x80000000}


class WavLayout(NamedTuple):
    """Where the samples of a simple WAV file are and how they are stored."""

    kind: int  # 1 integer PCM, 3 IEEE float
    channels: int
    rate: int
    bits: int
    start: int  # offset of the first sample byte
    size: int  # data chunk size the header declares

    @property
    def declared_frames(self) -> int:
        """Frames the header promises (the file may hold fewer when it was cut short)."""
        return self.size // (self.bits // 8 * self.channels)


def parse_pcm_wav(data: bytes) -> WavLayout | None:
    """The layout of an uncompressed RIFF/WAVE file, or None when it is not a simple one.

    Reads headers only, so limits can be checked before any sample is converted.
    """
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        return None
    fmt = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"fmt ":
            fmt = _parse_fmt(data[body : body + size])
            if fmt is None:
                return None
        elif chunk_id == b"data":
            if fmt is None or size in _UNKNOWN_SIZES:
                return None
            return WavLayout(*fmt, start=body, size=size)
        pos = body + size + (size & 1)  # chunks are padded to an even length
    return None


def pcm_samples(data: bytes, layout: WavLayout) -> np.ndarray:
    """float32 ``(frames, channels)``, scaled as ``soundfile.read(dtype="float32")`` scales them.

    Only whole frames present in ``data`` are returned (a cut-short file gives fewer than
    ``layout.declared_frames``; the caller's framing check refuses those first).
    """
    kind, channels, _, bits, start, size = layout
    width = bits // 8
    available = max(0, min(size, len(data) - start)) // (width * channels)
    raw = memoryview(data)[start : start + available * width * channels]
    if kind == _FLOAT:
        values = np.frombuffer(raw, "<f4" if bits == 32 else "<f8").astype(np.float32)
    elif bits == 8:  # unsigned, centred on 128
        values = (np.frombuffer(raw, np.uint8).astype(np.float32) - np.float32(128.0)) * np.float32(_INT_SCALE[8])
    elif bits == 24:
        packed = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        wide = np.zeros((len(packed), 4), np.uint8)
        wide[:, 1:] = packed  # little-endian: the 3 bytes become the top of an int32
        values = wide.view("<i4")[:, 0].astype(np.float32) * np.float32(_INT_SCALE[24])
    else:
        values = np.frombuffer(raw, "<i2" if bits == 16 else "<i4").astype(np.float32) * np.float32(_INT_SCALE[bits])
    return values.reshape(-1, channels)


def _parse_fmt(chunk: bytes) -> tuple[int, int, int, int] | None:
    """(kind, channels, rate, bits) of a PCM or float fmt chunk; None for anything else."""
    if len(chunk) < 16:
        return None
    tag, channels, rate, _, block_align, bits = struct.unpack_from("<HHIIHH", chunk)
    if tag == _EXTENSIBLE:
        if len(chunk) < 40:
            return None
        valid_bits = struct.unpack_from("<H", chunk, 18)[0]
        (tag,) = struct.unpack_from("<H", chunk, 24)  # first two bytes of the subformat GUID
        if valid_bits not in (0, bits):
            return None  # e.g. 20 valid bits in 24-bit containers: let libsndfile decide
    if channels < 1 or rate < 1 or block_align != channels * bits // 8:
        return None
    if tag == _PCM and bits in _INT_SCALE:
        return _PCM, channels, rate, bits
    if tag == _FLOAT and bits in (32, 64):
        return _FLOAT, channels, rate, bits
    return None
