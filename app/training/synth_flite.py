"""English words in voices built from recordings of real people (flite), for the speech fine-tune.

Why: the English-digit gap is between voices (a query's own speaker's clips rank far above another
speaker's), and espeak-ng's formant synthesis (app/training/synth_speech.py) sounds like no real
person. flite, CMU's small synthesiser (Debian main, a BSD-style licence), ships voices made from
recordings of real speakers: ``kal16`` (diphones of an American man) and ``awb``, ``rms``, ``slt``
(statistical-parametric voices trained on the CMU ARCTIC recordings of a Scottish man, an American
man and an American woman). Four voices are few, so each "speaker" here is one of them with its own
speaking rate (flite's ``duration_stretch``) and a pitch-and-formant shift (sox ``pitch``, which
keeps the duration): a shorter or longer vocal tract, as speed perturbation gives real speakers.

A speaker id such as ``flite:slt-d1.12-c+140`` is the manifest's speaker column. flite and sox are
deterministic for given arguments and the speakers are drawn from a seeded generator, so a seed
fixes every file.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.training.synth_speech import run_synthesis, slug, trim_silence, write_clip

VOICES = ("kal16", "awb", "rms", "slt")  # flite's built-in voices; "kal" is kal16's speaker at 8 kHz
STRETCH = (0.85, 1.25)  # duration_stretch drawn from (1.0 is the voice's own rate)
CENTS = (-250, 250)  # sox pitch shift drawn from, in cents (+-250: about +-15% in pitch and formants)


@dataclass(frozen=True)
class FliteSpeaker:
    voice: str
    stretch: float
    cents: int

    @property
    def id(self) -> str:
        return f"flite:{self.voice}-d{self.stretch:.2f}-c{self.cents:+d}"


def binaries() -> tuple[str, str]:
    """(flite, sox) paths, or a clear error naming the Debian packages."""
    flite, sox = shutil.which("flite"), shutil.which("sox")
    if flite is None or sox is None:
        raise RuntimeError("flite and sox are needed to synthesise flite voices (apt-get install flite sox)")
    return flite, sox


def choose_speakers(n: int, seed: int, voices: tuple[str, ...] = VOICES) -> list[FliteSpeaker]:
    """``n`` distinct speakers, the voices taken in turn, each with its own seeded rate and shift."""
    if n < 1 or not voices:
        raise ValueError("need at least one speaker and one voice")
    rng = np.random.default_rng(seed)
    speakers: dict[str, FliteSpeaker] = {}
    while len(speakers) < n:
        speaker = FliteSpeaker(voices[len(speakers) % len(voices)], round(float(rng.uniform(*STRETCH)), 2),
                               int(rng.integers(CENTS[0], CENTS[1] + 1)))
        speakers.setdefault(speaker.id, speaker)
    return list(speakers.values())


def synthesise(flite: str, sox: str, speaker: FliteSpeaker, text: str, sample_rate: int) -> np.ndarray:
    """One utterance as float32 at ``sample_rate``, silence trimmed (as synth_speech.synthesise)."""
    import soundfile as sf

    with tempfile.TemporaryDirectory(prefix="flite-") as tmp:
        said, shifted = Path(tmp) / "said.wav", Path(tmp) / "shifted.wav"
        subprocess.run([flite, "-voice", speaker.voice, "--setf", f"duration_stretch={speaker.stretch}",
                        "-t", text, "-o", str(said)], check=True, capture_output=True, timeout=30)
        # sox resamples with its own high-quality filter in the same call
        subprocess.run([sox, "-q", str(said), "-r", str(sample_rate), str(shifted), "pitch", str(speaker.cents)],
                       check=True, capture_output=True, timeout=30)
        wave, _ = sf.read(shifted, dtype="float32", always_2d=True)
    return np.clip(trim_silence(wave.mean(axis=1), sample_rate), -1.0, 1.0).astype(np.float32)


def synthesise_words(words: list[str], n_speakers: int, sample_rate: int, out: str | Path, seed: int = 0,
                     workers: int = 2) -> Path:
    """Every word by ``n_speakers`` flite speakers: ``OUT/<word>/<speaker>.wav`` and ``OUT/manifest.csv``
    (path,label,speaker; labels ``synth:<word>``, as synth_speech labels espeak-ng's words, so the same
    word from both synthesisers is one class). Returns the manifest's path."""
    flite, sox = binaries()
    speakers = choose_speakers(n_speakers, seed)
    out = Path(out)
    jobs = [(w, slug(w), s) for w in words for s in speakers]

    def make(job: tuple[str, str, FliteSpeaker]) -> dict[str, str] | None:
        word, name, speaker = job
        wave = synthesise(flite, sox, speaker, word, sample_rate)
        return write_clip(out, name, speaker.id.split(":", 1)[1], wave, sample_rate, word, speaker.id)

    return run_synthesis(jobs, make, out, workers, flite, {
        "synthesiser": "flite", "seed": seed, "sample_rate": sample_rate, "words": words,
        "speakers": [s.id for s in speakers]})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``recall train general-audio``'s flite options (off by default: earlier recipes train as before)."""
    parser.add_argument("--flite-digit-voices", type=int, default=0,
                        help="flite speakers per trained English digit word, added to the speech fine-tune (needs flite)")
    parser.add_argument("--flite-word-voices", type=int, default=0,
                        help="flite speakers per English everyday word (184), added to the speech fine-tune")
