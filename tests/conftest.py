"""Shared fixtures: settings in a temp dir, the app with its lifespan running, media makers."""

from __future__ import annotations

import io
import os

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from PIL import Image

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from app.main import create_app  # noqa: E402
from app.settings import Settings  # noqa: E402


def make_settings(tmp_path, **overrides) -> Settings:
    """Settings isolated in tmp_path, with the training-free encoders (fast, deterministic)."""
    base = {
        "data_dir": tmp_path / "data",
        "encoders": {"default_audio": "audio-baseline", "default_image": "image-baseline"},
    }
    base.update(overrides)
    return Settings(**base)


@pytest.fixture
def settings(tmp_path) -> Settings:
    return make_settings(tmp_path)


@pytest.fixture
def client(settings):
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def tone_wav(freq: float = 440.0, seconds: float = 1.0, rate: int = 16000, fmt: str = "WAV", amp: float = 0.3) -> bytes:
    """A sine tone as encoded bytes."""
    t = np.arange(int(seconds * rate)) / rate
    buf = io.BytesIO()
    sf.write(buf, (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate, format=fmt)
    return buf.getvalue()


def wave_bytes(wave: np.ndarray, rate: int = 16000) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, wave.astype(np.float32), rate, format="WAV")
    return buf.getvalue()


def png_bytes(color: tuple[int, int, int], size: tuple[int, int] = (64, 48), stripes: bool = False) -> bytes:
    array = np.zeros((size[1], size[0], 3), np.uint8)
    array[:] = color
    if stripes:
        array[::4] = 255 - np.asarray(color)
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def error_of(response) -> dict:
    """The one error shape, asserted: {"error": {"code", "message"}}."""
    body = response.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str), body
    assert "Traceback" not in body["error"]["message"]
    return body["error"]
