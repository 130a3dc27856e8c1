"""decode_image: formats, colour modes, EXIF orientation, decompression bombs, broken files."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image, ImageFile

from app.errors import InvalidInput, PayloadTooLarge, UnsupportedMedia
from app.media.image import decode_image

RED = (255, 0, 0)
BLUE = (0, 0, 255)


def encode(image: Image.Image, fmt: str, **params: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **params)
    return buffer.getvalue()


def two_colour(width: int = 40, height: int = 20) -> Image.Image:
    """Left half red, right half blue: any rotation or flip is visible in the corners."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[:, : width // 2] = RED
    pixels[:, width // 2 :] = BLUE
    return Image.fromarray(pixels)


def png_header_only(width: int, height: int) -> bytes:
    """A PNG that declares ``width`` x ``height`` RGB pixels but carries almost no data."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


# --- formats and colour modes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "params"),
    [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"lossless": True}), ("GIF", {})],
)
def test_each_format_decodes_to_rgb(fmt: str, params: dict[str, object]) -> None:
    pixels = decode_image(encode(two_colour(), fmt, **params), filename=f"x.{fmt.lower()}")

    assert pixels.shape == (20, 40, 3) and pixels.dtype == np.uint8
    assert pixels.flags.c_contiguous
    # JPEG's chroma subsampling blurs the boundary, so compare away from it.
    np.testing.assert_allclose(pixels[10, 5], RED, atol=12)
    np.testing.assert_allclose(pixels[10, 35], BLUE, atol=12)


def test_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (8, 8), RED), Image.new("RGB", (8, 8), BLUE)]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)

    pixels = decode_image(data)

    assert (pixels == RED).all()


def test_transparent_pixels_are_composited_on_white() -> None:
    rgba = np.zeros((4, 4, 4), dtype=np.uint8)
    rgba[:, :2] = (255, 0, 0, 255)  # opaque red
    rgba[:, 2:] = (0, 0, 255, 0)  # fully transparent blue: must come out white
    pixels = decode_image(encode(Image.fromarray(rgba, "RGBA"), "PNG"))

    assert (pixels[:, :2] == RED).all()
    assert (pixels[:, 2:] == 255).all()


def test_half_transparent_black_is_mid_grey() -> None:
    la = Image.fromarray(np.stack([np.zeros((2, 2)), np.full((2, 2), 128)], axis=2).astype(np.uint8), "LA")
    pixels = decode_image(encode(la, "PNG"))

    # 0 * 128/255 + 255 * (1 - 128/255) = 127
    np.testing.assert_allclose(pixels, 127, atol=1)


def test_palette_with_transparent_index_is_composited() -> None:
    palette = Image.new("P", (4, 4), 0)
    palette.putpalette([0, 255, 0] + [255, 0, 0] * 255)
    data = encode(palette, "PNG", transparency=0)

    assert (decode_image(data) == 255).all()


def test_greyscale_becomes_three_equal_channels() -> None:
    grey = Image.fromarray(np.arange(16, dtype=np.uint8).reshape(4, 4) * 16, "L")
    pixels = decode_image(encode(grey, "PNG"))

    assert pixels.shape == (4, 4, 3)
    assert (pixels[..., 0] == pixels[..., 1]).all() and (pixels[..., 1] == pixels[..., 2]).all()
    assert pixels[3, 3, 0] == 240


def test_sixteen_bit_greyscale_is_scaled_not_clipped() -> None:
    values = np.array([[0, 257 * 128], [65535, 257 * 64]], dtype=np.uint16)
    data = encode(Image.fromarray(values), "PNG")

    pixels = decode_image(data)

    np.testing.assert_array_equal(pixels[..., 0], [[0, 128], [255, 64]])


def test_cmyk_jpeg_becomes_rgb() -> None:
    cmyk = Image.new("CMYK", (8, 8), (0, 255, 255, 0))  # no cyan/black, full magenta+yellow = red
    pixels = decode_image(encode(cmyk, "JPEG", quality=95))

    assert pixels.shape == (8, 8, 3)
    np.testing.assert_allclose(pixels[4, 4], RED, atol=10)


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display", as phones write for portrait shots
    data = encode(two_colour(40, 20), "JPEG", quality=95, exif=exif)

    pixels = decode_image(data)

    # Rotating the 40x20 red|blue image 90 degrees clockwise puts red on top.
    assert pixels.shape == (40, 20, 3)
    np.testing.assert_allclose(pixels[5, 10], RED, atol=12)
    np.testing.assert_allclose(pixels[35, 10], BLUE, atol=12)


# --- decompression bombs ---------------------------------------------------------------------


def test_header_claiming_ten_billion_pixels_is_refused() -> None:
    data = png_header_only(100_000, 100_000)
    assert len(data) < 200

    with pytest.raises(PayloadTooLarge, match=r"'bomb.png' is too large to decode.*downscale"):
        decode_image(data, filename="bomb.png")


def test_over_max_pixels_is_refused_before_pixels_are_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_load(self: Image.Image) -> None:
        raise AssertionError("pixels decoded before the size check")

    data = encode(two_colour(200, 100), "PNG")
    monkeypatch.setattr(ImageFile.ImageFile, "load", no_load)

    with pytest.raises(PayloadTooLarge, match=r"200 x 100 = 20000 pixels\); the limit is 10000 pixels"):
        decode_image(data, filename="big.png", max_pixels=10_000)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_pillow_warning_threshold_is_also_a_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Between MAX_IMAGE_PIXELS and twice it Pillow only warns; we refuse.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 5_000)
    data = encode(two_colour(100, 60), "PNG")

    with pytest.raises(PayloadTooLarge, match=r"the limit is 5000 pixels"):
        decode_image(data, max_pixels=1_000_000)


# --- broken and wrong input ------------------------------------------------------------------


def test_empty_is_invalid() -> None:
    with pytest.raises(InvalidInput, match=r"'a.jpg' is empty"):
        decode_image(b"", filename="a.jpg")


@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP", "GIF"])
@pytest.mark.parametrize("keep", [0.2, 0.5, 0.9])
def test_truncated_image_is_invalid(fmt: str, keep: float) -> None:
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    data = encode(Image.fromarray(noise), fmt)

    with pytest.raises(InvalidInput, match=r"'cut' is a corrupt or truncated image"):
        decode_image(data[: int(len(data) * keep)], filename="cut")


def test_png_magic_with_junk_is_invalid_not_unsupported() -> None:
    with pytest.raises(InvalidInput, match="corrupt or truncated"):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"junk" * 50, filename="x.png")


def test_text_is_unsupported() -> None:
    with pytest.raises(UnsupportedMedia, match=r"'a.txt' is not an image format.*JPEG, PNG, WebP or GIF"):
        decode_image(b"just some text\n" * 20, filename="a.txt")


def test_audio_is_unsupported_and_named_as_audio() -> None:
    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 40
    with pytest.raises(UnsupportedMedia, match=r"'a.wav' is audio \(WAV\), not an image"):
        decode_image(wav, filename="a.wav")


def test_other_image_formats_are_unsupported_by_name() -> None:
    with pytest.raises(UnsupportedMedia, match=r"'a.bmp' is a BMP image, which is not supported"):
        decode_image(encode(two_colour(), "BMP"), filename="a.bmp")


def test_non_positive_max_pixels_is_a_programming_error() -> None:
    with pytest.raises(ValueError):
        decode_image(encode(two_colour(), "PNG"), max_pixels=0)
