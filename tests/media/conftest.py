"""Media fixtures built at test time: numpy + soundfile for PCM formats, the ffmpeg CLI for the rest.

Without ffmpeg the tests using it are skipped with the package named (tests/system_deps.py),
and CI fails on that skip: there ffmpeg must be installed. Every clip is short (about 1 s) so the whole module stays fast on two cores.
"""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Callable

import numpy as np
import pytest
import soundfile as sf

from tests.system_deps import require_system

TONE_HZ = 440.0


def sine(freq: float, seconds: float, rate: int, channels: int = 1, amplitude: float = 0.5) -> np.ndarray:
    """A (frames, channels) float32 sine, identical in every channel."""
    t = np.arange(int(round(seconds * rate))) / rate
    wave = (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)
    return np.repeat(wave[:, None], channels, axis=1)


def encode_soundfile(frames: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    """Encode with libsndfile into memory (WAV, FLAC, OGG)."""
    buffer = io.BytesIO()
    sf.write(buffer, frames, rate, format=fmt, subtype=subtype)
    return buffer.getvalue()


def peak_hz(wave: np.ndarray, rate: int) -> float:
    """Frequency of the largest FFT bin."""
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(wave.size)))
    return float(np.fft.rfftfreq(wave.size, 1 / rate)[np.argmax(spectrum)])


@pytest.fixture(scope="session")
def ffmpeg(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., bytes]:
    """Run the ffmpeg CLI and return the output file's bytes: ``ffmpeg(ext, *args)``.

    ``args`` are inserted between ``ffmpeg -y`` and the output path; ``{wav}`` in them is
    replaced by a 1 s, 44.1 kHz stereo 440 Hz WAV.
    """
    require_system("ffmpeg")
    binary = shutil.which("ffmpeg")
    workdir = tmp_path_factory.mktemp("ffmpeg")
    source = workdir / "source.wav"
    sf.write(source, sine(TONE_HZ, 1.0, 44100, channels=2), 44100)
    counter = iter(range(1_000_000))

    def run(ext: str, *args: str) -> bytes:
        out = workdir / f"out{next(counter)}.{ext}"
        argv = [binary, "-v", "error", "-nostdin", "-y", *(a.replace("{wav}", str(source)) for a in args), str(out)]
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
        return out.read_bytes()

    return run


@pytest.fixture(scope="session")
def encoded(ffmpeg: Callable[..., bytes]) -> dict[str, bytes]:
    """One second of a 440 Hz stereo tone at 44.1 kHz in every container the service accepts."""
    stereo = sine(TONE_HZ, 1.0, 44100, channels=2)
    return {
        "wav": encode_soundfile(stereo, 44100, "WAV", "PCM_16"),
        "flac": encode_soundfile(stereo, 44100, "FLAC"),
        "ogg": encode_soundfile(stereo, 44100, "OGG", "VORBIS"),
        "mp3": ffmpeg("mp3", "-i", "{wav}", "-c:a", "libmp3lame", "-b:a", "128k"),
        "m4a": ffmpeg("m4a", "-i", "{wav}", "-c:a", "aac", "-b:a", "96k"),
        "opus": ffmpeg("opus", "-i", "{wav}", "-c:a", "libopus", "-b:a", "48k"),
        "webm": ffmpeg("webm", "-i", "{wav}", "-c:a", "libopus", "-b:a", "48k"),
        "mp4": ffmpeg(
            "mp4",
            "-f", "lavfi", "-i", "testsrc=size=64x48:rate=10:duration=1",
            "-i", "{wav}",
            "-c:v", "mpeg4", "-c:a", "aac", "-shortest",
        ),
    }
