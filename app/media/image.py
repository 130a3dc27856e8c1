"""Decode an uploaded image to an RGB pixel array, refusing decompression bombs cheaply.

Pillow reads only the header in ``Image.open``; pixels are decoded by ``load()``. The pixel
limit is therefore checked between the two, so a 50 KB PNG that claims 100000 x 100000 pixels
is refused before 30 GB are allocated. ``LOAD_TRUNCATED_IMAGES`` stays off so a cut-short file
is an error rather than an image with a grey bottom half.
"""

from __future__ import annotations

import io
import struct

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from app.errors import InvalidInput, PayloadTooLarge, UnsupportedMedia
from app.media.sniff import sniff

SUPPORTED_IMAGES = "JPEG, PNG, WebP or GIF"

# Pillow plugin ids we let Image.open try. Restricting them keeps Pillow's many exotic (and
# some external-tool-backed, like EPS through Ghostscript) decoders away from client bytes.
# Camera JPEGs that Pillow reports as "MPO" are opened by the JPEG plugin, so they pass.
_PILLOW_FORMATS = ("JPEG", "PNG", "WEBP", "GIF")
_SNIFFED_SUPPORTED = {"JPEG", "PNG", "WebP", "GIF"}

# What Pillow raises for a broken file: its decoders use OSError ("image file is truncated"),
# SyntaxError ("broken PNG file"), ValueError, EOFError and struct.error for short headers.
_DECODE_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error)

_WHITE = (255, 255, 255, 255)


def decode_image(data: bytes, *, filename: str = "upload", max_pixels: int = 40_000_000) -> np.ndarray:
    """Decode an image file to RGB pixels.

    GIFs and animated WebPs give their first frame. EXIF orientation is applied, so a phone
    photo comes out upright. Palette, greyscale (8- and 16-bit) and CMYK images are converted to
    RGB; transparent pixels are composited on white.

    Args:
        data: The uploaded file's bytes.
        filename: Name used in error messages.
        max_pixels: Largest accepted width x height, checked from the header before any pixel
            is decoded. Pillow's own ``Image.MAX_IMAGE_PIXELS`` also applies when it is lower.

    Returns:
        A C-contiguous uint8 array of shape (height, width, 3).

    Raises:
        InvalidInput: The file is empty, truncated or corrupt.
        UnsupportedMedia: The file is not a JPEG, PNG, WebP or GIF image (audio, video, other
            image formats, anything else).
        PayloadTooLarge: The image has more than ``max_pixels`` pixels (a decompression bomb).
        ValueError: ``max_pixels`` is not positive (a programming error, not a client's).
    """
    if max_pixels <= 0:
        raise ValueError(f"max_pixels must be positive, got {max_pixels}")
    if not data:
        raise InvalidInput(f"'{filename}' is empty (0 bytes): upload a {SUPPORTED_IMAGES} image")
    sniffed = sniff(data)
    if sniffed is not None and sniffed.modality != "image":
        raise UnsupportedMedia(f"'{filename}' is {sniffed.modality} ({sniffed.format}), not an image: upload {SUPPORTED_IMAGES}")
    if sniffed is not None and sniffed.format not in _SNIFFED_SUPPORTED:
        raise UnsupportedMedia(f"'{filename}' is a {sniffed.format} image, which is not supported: convert it to {SUPPORTED_IMAGES}")
    known_format = sniffed is not None
    # Pillow only warns between MAX_IMAGE_PIXELS and twice that; treat its warning threshold as
    # ours too. Not done with warnings.catch_warnings: that swaps process-global filters and is
    # unsafe when several requests decode at once.
    limit = max_pixels if Image.MAX_IMAGE_PIXELS is None else min(max_pixels, Image.MAX_IMAGE_PIXELS)

    try:
        image = Image.open(io.BytesIO(data), formats=_PILLOW_FORMATS)
    except Image.DecompressionBombError as exc:
        # Pillow refuses (in open, from the header) images over twice MAX_IMAGE_PIXELS.
        raise _too_large(filename, str(exc), limit) from exc
    except UnidentifiedImageError as exc:
        if known_format:
            raise _corrupt(filename, "its header cannot be read") from exc
        raise UnsupportedMedia(f"'{filename}' is not an image format this service can read: upload {SUPPORTED_IMAGES}") from exc
    except _DECODE_ERRORS as exc:
        raise _corrupt(filename, str(exc)) from exc

    with image:
        width, height = image.size
        if width * height > limit:
            raise _too_large(filename, f"{width} x {height} = {width * height} pixels", limit)
        if width == 0 or height == 0:
            raise _corrupt(filename, f"it declares a {width} x {height} image")
        try:
            image.load()  # decodes the first frame; raises on truncation
            upright = _exif_transpose(image)
            return _to_rgb(upright)
        except Image.DecompressionBombError as exc:
            raise _too_large(filename, str(exc), limit) from exc
        except _DECODE_ERRORS as exc:
            raise _corrupt(filename, str(exc)) from exc


def _exif_transpose(image: Image.Image) -> Image.Image:
    """Apply the EXIF orientation tag; a malformed EXIF block leaves the image as stored."""
    try:
        transposed = ImageOps.exif_transpose(image)
    except (SyntaxError, ValueError, KeyError, TypeError, struct.error):
        # Orientation is metadata: a broken EXIF block is no reason to refuse good pixels.
        return image
    return transposed if transposed is not None else image


def _to_rgb(image: Image.Image) -> np.ndarray:
    mode = image.mode
    if mode.startswith("I"):
        # 16-bit greyscale PNGs open as "I"/"I;16"; convert("RGB") would clip at 255 rather than
        # scale, turning most of the image white.
        grey = np.asarray(image, dtype=np.float64) / 257.0
        grey8 = np.clip(np.rint(grey), 0, 255).astype(np.uint8)
        return np.ascontiguousarray(np.repeat(grey8[:, :, None], 3, axis=2))
    has_alpha = mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, _WHITE)
        image = Image.alpha_composite(background, rgba)
    return np.array(image.convert("RGB"), dtype=np.uint8)


def _too_large(filename: str, detail: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"'{filename}' is too large to decode ({detail}); the limit is {limit} pixels: downscale the image"
    )


def _corrupt(filename: str, reason: str) -> InvalidInput:
    return InvalidInput(f"'{filename}' is a corrupt or truncated image ({reason}): export or upload it again")
