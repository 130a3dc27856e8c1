"""Generated demo media: synthetic sounds, espeak-ng speech and procedural images.

Everything is made on the spot from seeded numbers (and the local espeak-ng binary), so a fresh
install shows working search without downloading anything. Each generator returns
:class:`DemoFile` records ready for the service's own ingest path.

The audio is built so that search has something to find: every sound kind comes in several
variants (a query by one finds its siblings), and a few long "recordings" hide the same sounds
or words at known times, so the results list every occurrence as a segment.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import soundfile as sf
from PIL import Image, ImageDraw

log = logging.getLogger(__name__)

RATE = 16000
SPEECH_WORDS = ("hello", "seven", "music", "recall", "window")
# espeak-ng voice variants that ship with espeak-ng-data (the "+f3" style variants are optional
# data on some distributions; the base languages are always present)
SPEECH_VOICES = ("en", "en-us", "en-gb-scotland")


@dataclass
class DemoFile:
    """One generated file and the metadata stored with it."""

    filename: str
    data: bytes
    metadata: dict[str, Any] = field(default_factory=dict)


def wav_bytes(wave: np.ndarray, rate: int = RATE) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, np.clip(wave, -1.0, 1.0).astype(np.float32), rate, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


# --------------------------------------------------------------------------- sounds


def _envelope(n: int, fade: int = 160) -> np.ndarray:
    # short fades avoid clicks, which would make every sound share a broadband onset
    env = np.ones(n, np.float32)
    fade = min(fade, n // 2)
    env[:fade] = np.linspace(0, 1, fade)
    env[n - fade :] = np.linspace(1, 0, fade)
    return env


def _tone(freq: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return 0.4 * np.sin(2 * np.pi * freq * t) * _envelope(len(t))


def _chirp(f0: float, f1: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * seconds))
    return 0.4 * np.sin(phase) * _envelope(len(t))


def _noise_burst(rng: np.random.Generator, seconds: float, smooth: int) -> np.ndarray:
    noise = rng.standard_normal(int(seconds * RATE))
    if smooth > 1:  # a moving average darkens white noise into a rumble
        noise = np.convolve(noise, np.ones(smooth) / smooth, mode="same") * np.sqrt(smooth)
    return 0.25 * noise * _envelope(len(noise))


def _beeps(freq: float, count: int) -> np.ndarray:
    beep, gap = _tone(freq, 0.12), np.zeros(int(0.08 * RATE))
    return np.concatenate([np.concatenate([beep, gap]) for _ in range(count)])


def _siren(low: float, high: float, seconds: float) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    freq = low + (high - low) * 0.5 * (1 + np.sin(2 * np.pi * 2.0 * t))
    return 0.4 * np.sin(2 * np.pi * np.cumsum(freq) / RATE) * _envelope(len(t))


def sound_kinds(rng: np.random.Generator) -> dict[str, Callable[[float], np.ndarray]]:
    """Sound kind -> function of a variation factor (about 0.9-1.1) returning a waveform."""
    return {
        "low-tone": lambda v: _tone(220 * v, 1.2),
        "high-tone": lambda v: _tone(1760 * v, 1.2),
        "chirp-up": lambda v: _chirp(300 * v, 3000 * v, 1.2),
        "chirp-down": lambda v: _chirp(3000 * v, 300 * v, 1.2),
        "hiss": lambda v: _noise_burst(rng, 1.0 * v, 1),
        "rumble": lambda v: _noise_burst(rng, 1.0 * v, 40),
        "beeps": lambda v: _beeps(1000 * v, 4),
        "siren": lambda v: _siren(600 * v, 1200 * v, 1.5),
    }


def generated_sounds(seed: int = 7, variants: int = 3) -> list[DemoFile]:
    """Short clips: ``variants`` slightly different takes of every sound kind, with a little noise."""
    rng = np.random.default_rng(seed)
    files = []
    for kind, make in sound_kinds(rng).items():
        for n in range(variants):
            wave = make(float(rng.uniform(0.92, 1.08)))
            wave = wave + 0.01 * rng.standard_normal(len(wave))
            files.append(DemoFile(f"{kind}-{n + 1}.wav", wav_bytes(wave), {"kind": kind, "source": "generated", "label": kind.replace("-", " ")}))
    return files


def generated_recordings(seed: int = 11, count: int = 3, seconds: float = 12.0) -> list[DemoFile]:
    """Long clips of quiet noise with two or three sounds placed at recorded times."""
    rng = np.random.default_rng(seed)
    kinds = sound_kinds(rng)
    names = list(kinds)
    files = []
    for n in range(count):
        wave = 0.01 * rng.standard_normal(int(seconds * RATE))
        placed = []
        chosen = [str(k) for k in rng.choice(names, size=2, replace=False)]
        # the first sound occurs twice: a query by it should list both places
        for kind in (chosen[0], chosen[0], chosen[1]):
            sound = kinds[kind](float(rng.uniform(0.95, 1.05)))
            for _ in range(20):  # place without overlapping an earlier sound
                start = float(rng.uniform(0.3, seconds - len(sound) / RATE - 0.3))
                if all(abs(start - s) > 2.0 for _, s, _ in placed):
                    break
            i = int(start * RATE)
            wave[i : i + len(sound)] += sound
            placed.append((kind, round(start, 2), round(start + len(sound) / RATE, 2)))
        placed.sort(key=lambda p: p[1])
        contains = ", ".join(f"{kind} at {start:.1f}s" for kind, start, _ in placed)
        # the true spans, for checking that search finds every occurrence
        occurrences = [{"kind": kind, "start": start, "end": end} for kind, start, end in placed]
        metadata = {"kind": "recording", "source": "generated", "label": contains, "occurrences": occurrences}
        files.append(DemoFile(f"recording-{n + 1}.wav", wav_bytes(wave), metadata))
    return files


# --------------------------------------------------------------------------- speech


def _espeak(binary: str, voice: str, text: str, directory: Path, name: str) -> np.ndarray:
    path = directory / f"{name}.wav"
    subprocess.run([binary, "-v", voice, "-s", "150", "-w", str(path), text], check=True, capture_output=True, timeout=20)
    wave, rate = sf.read(path, dtype="float32", always_2d=False)
    if rate != RATE:  # espeak-ng writes 22050 Hz; linear resampling is plenty for a demo
        positions = np.arange(int(len(wave) * RATE / rate)) * (rate / RATE)
        wave = np.interp(positions, np.arange(len(wave)), wave).astype(np.float32)
    return wave


def generated_speech(seed: int = 3) -> list[DemoFile]:
    """Spoken words in a few voices, plus one sentence that says "recall" twice; [] without espeak-ng."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        log.warning("espeak-ng is not installed: the demo has no speech (apt-get install espeak-ng)")
        return []
    rng = np.random.default_rng(seed)
    files = []
    try:
        with tempfile.TemporaryDirectory(prefix="recall-demo-") as tmp:
            for voice in SPEECH_VOICES:
                for word in SPEECH_WORDS:
                    wave = _espeak(binary, voice, word, Path(tmp), f"{voice}-{word}")
                    files.append(DemoFile(f"say-{word}-{voice}.wav", wav_bytes(wave), {"kind": "speech", "word": word, "voice": voice, "source": "espeak-ng", "label": f'"{word}" ({voice})'}))
            parts, placed, clock = [], [], 0.0
            for text in ("recall", "the sound of the window", "and then", "recall", "it again"):
                wave = _espeak(binary, "en", text, Path(tmp), f"sentence-{len(parts)}")
                pause = np.zeros(int(float(rng.uniform(0.4, 0.8)) * RATE), np.float32)
                if text == "recall":
                    start = clock + len(pause) / RATE
                    placed.append({"kind": "speech", "word": "recall", "start": round(start, 2), "end": round(start + len(wave) / RATE, 2)})
                parts += [pause, wave]
                clock += (len(pause) + len(wave)) / RATE
            sentence = np.concatenate(parts + [np.zeros(RATE // 2, np.float32)])
            label = "speech; 'recall' at " + ", ".join(f"{p['start']:.1f}s" for p in placed)
            metadata = {"kind": "recording", "source": "espeak-ng", "label": label, "occurrences": placed}
            files.append(DemoFile("sentence-recall-twice.wav", wav_bytes(sentence), metadata))
    except (subprocess.SubprocessError, OSError, RuntimeError) as exc:
        log.warning("espeak-ng failed (%s): the demo has no speech", exc)
        return []
    return files


# --------------------------------------------------------------------------- images


def _png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG", optimize=False)
    return buffer.getvalue()


def generated_images(count: int = 48, seed: int = 5) -> list[DemoFile]:
    """Captioned procedural scenes (app.training.synth_images), or simple shapes when it is absent."""
    try:
        from app.training import synth_images
    except ImportError:
        return _simple_shapes(count, seed)
    files = []
    for n, scene in enumerate(synth_images.generate_scenes(count, seed)):
        metadata = {"caption": scene.captions[0], "shape": scene.shape, "colour": scene.colour, "background": scene.background, "source": "generated"}
        files.append(DemoFile(f"scene-{n + 1:02d}-{scene.colour}-{scene.shape}.png", _png(synth_images.render(scene)), metadata))
    return files


def _simple_shapes(count: int, seed: int) -> list[DemoFile]:
    rng = np.random.default_rng(seed)
    colours = {"red": (215, 35, 35), "green": (40, 165, 60), "blue": (40, 80, 215), "yellow": (240, 215, 40)}
    files = []
    for n in range(count):
        colour, shape = str(rng.choice(list(colours))), str(rng.choice(["circle", "square"]))
        image = Image.new("RGB", (128, 128), tuple(int(v) for v in rng.integers(0, 255, 3)))
        draw = ImageDraw.Draw(image)
        x, y, r = int(rng.integers(30, 98)), int(rng.integers(30, 98)), int(rng.integers(12, 28))
        (draw.ellipse if shape == "circle" else draw.rectangle)([x - r, y - r, x + r, y + r], fill=colours[colour])
        metadata = {"caption": f"a {colour} {shape}", "shape": shape, "colour": colour, "source": "generated"}
        files.append(DemoFile(f"shape-{n + 1:02d}-{colour}-{shape}.png", _png(np.asarray(image)), metadata))
    return files
