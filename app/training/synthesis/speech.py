"""Extra training words spoken by espeak-ng in many voices, with a manifest for ``--extra-manifest``.

Why: the speech encoder learns "same word, other voice" from a few dozen real keywords. Synthetic
words widen the vocabulary it has heard, so the embedding generalises to words it was never
trained on; they add to the real data and never replace it (``recall train audio
--extra-manifest`` puts them into the training split only).

A "speaker" here is one espeak-ng voice variant: an English dialect voice (``en-gb-scotland``),
a variant (``+f3``, ``+croak``, ``+whisper``), a pitch (``-p``) and a speed (``-s``). Its id,
e.g. ``en-029+f3-p41-s162``, is the manifest's speaker column. Labels are ``synth:<word>`` so
they can never equal a real data set's label. espeak-ng's output for given arguments is
deterministic, and the voices are drawn from a seeded generator, so a seed fixes every file.

    python -m app.training.synthesis.speech --out .gpu/synth --voices 24 --sample-rate 8000
"""

from __future__ import annotations

import csv
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LABEL_PREFIX = "synth:"

# Words that must not be synthesised by default: the 40 Arabic Speech Commands keywords, the FSDD
# digits (and "ten"), and English homophones of both (a "to" clip labelled apart from real "two" clips would
# teach the model to separate identical sounds). Multi-word keywords contribute each word.
RESERVED = frozenset(
    "backward cancel close digit direction disable down eight enable enter five forward four keyword left move next "
    "nine no ok okay one open options previous receive record right rotate send seven six start stop three two undo "
    "up yes zero zoom in out ten "
    "won to too for fore ate know write rite wright sicks".split()
)

# 184 everyday English words, none of them reserved; one or two syllables mostly, like keywords.
DEFAULT_WORDS = tuple(
    """time year people way day man thing woman life child world school state family student group country
    problem hand part place case week company system program question work number night point home water
    room mother area money story fact month book eye job word business side kind head house service friend
    father power hour game line member law car city name team minute idea body face level office door health
    person art history party result morning reason girl moment air teacher education good new first last long
    great little old big high different small large young important public bad same able apple banana yellow
    green purple blue black white red garden window table chair kitchen river mountain island forest summer
    winter autumn music picture paper pencil letter flower animal rabbit tiger monkey doctor market station
    bottle coffee sugar butter bread cheese chicken dinner jacket pocket button camera engine rocket planet
    silver golden happy quiet simple heavy empty better never always maybe because together tomorrow
    yesterday after before again under over between around behind hello thanks please sorry orange lemon
    candle basket pillow ticket village""".split()
)

# English dialect voices (espeak-ng's own, not mbrola: mbrola voices need an extra binary).
DIALECTS = ("en-gb", "en-us", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-rp", "en-gb-x-gbcwmd", "en-029", "en-us-nyc")
# Variants that still sound human; robots, "Demonic" and the like would teach nothing useful.
# "" is the dialect's own voice. Variants missing from an install are skipped (see available_variants).
VARIANTS = ("", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "f1", "f2", "f3", "f4", "f5", "croak", "whisper",
            "whisperf", "klatt", "klatt2", "klatt3", "klatt4", "adam", "Alex", "Alicia", "Andrea", "Andy", "Annie",
            "aunty", "belinda", "benjamin", "boris", "caleb", "david", "ed", "edward", "grandma", "grandpa", "john",
            "linda", "max", "Michael", "norbert", "paul", "quincy", "rob", "robert", "steph", "travis", "victor", "zac")
PITCH = (25, 75)  # espeak-ng -p range drawn from (0-99, default 50)
SPEED = (130, 195)  # -s words per minute (default 175); slower than 130 sounds like a drawl


@dataclass(frozen=True)
class Voice:
    language: str
    variant: str
    pitch: int
    speed: int

    @property
    def id(self) -> str:
        return f"{self.language}{'+' + self.variant if self.variant else ''}-p{self.pitch}-s{self.speed}"

    def args(self) -> list[str]:
        return ["-v", self.language + (f"+{self.variant}" if self.variant else ""), "-p", str(self.pitch), "-s", str(self.speed)]


def espeak_binary() -> str:
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise RuntimeError("espeak-ng is not installed (apt-get install espeak-ng)")
    return binary


def _listed(binary: str, which: str) -> list[list[str]]:
    """Rows of `espeak-ng --voices[=which]`: priority, language, gender, name, file, ..."""
    out = subprocess.run([binary, f"--voices={which}" if which else "--voices"], capture_output=True, text=True, check=True).stdout
    return [line.split() for line in out.splitlines()[1:] if line.split()]


def available_languages(binary: str, wanted: tuple[str, ...]) -> list[str]:
    """The wanted languages that espeak-ng has a non-mbrola voice for (an unknown -v is an error)."""
    have = {cols[1] for cols in _listed(binary, "") if len(cols) >= 5 and not cols[4].startswith("mb/")}
    return [lang for lang in wanted if lang in have]


def available_variants(binary: str, wanted: tuple[str, ...] = VARIANTS) -> list[str]:
    """The wanted variants present in this install: an unknown +variant is silently ignored by
    espeak-ng, which would give two "speakers" the same voice."""
    have = {cols[4].split("/", 1)[1] for cols in _listed(binary, "variant") if len(cols) >= 5 and cols[4].startswith("!v/")}
    return [v for v in wanted if v == "" or v in have]


def choose_voices(n: int, seed: int, languages: list[str], variants: list[str]) -> list[Voice]:
    """``n`` distinct voices: (language, variant) pairs in a seeded order, each with its own pitch and speed.

    Pairs are used before any repeats so that n up to len(languages) x len(variants) gives n
    different timbres; past that a pair recurs with another pitch and speed.
    """
    if n < 1 or not languages or not variants:
        raise ValueError("need at least one voice, language and variant")
    rng = np.random.default_rng(seed)
    pairs = [(lang, var) for lang in languages for var in variants]
    order = [pairs[i] for i in rng.permutation(len(pairs))]
    voices: dict[str, Voice] = {}
    while len(voices) < n:
        lang, var = order[len(voices) % len(order)]
        voice = Voice(lang, var, int(rng.integers(PITCH[0], PITCH[1] + 1)), int(rng.integers(SPEED[0], SPEED[1] + 1)))
        voices.setdefault(voice.id, voice)
    return list(voices.values())


def trim_silence(wave: np.ndarray, rate: int, floor_db: float = -40.0, margin_s: float = 0.02) -> np.ndarray:
    """Cut leading and trailing frames quieter than ``floor_db`` below the loudest 10 ms frame.

    espeak-ng pads each utterance with silence; real keyword clips are cut closer, and a
    relative floor keeps quiet voices (whisper) from being trimmed away. ``margin_s`` keeps the
    soft onset of a fricative.
    """
    frame = max(1, int(rate * 0.01))
    n = len(wave) // frame
    if n == 0:
        return wave
    rms = np.sqrt(np.mean(wave[: n * frame].reshape(n, frame).astype(np.float64) ** 2, axis=1))
    loud = np.flatnonzero(rms > rms.max() * 10 ** (floor_db / 20))
    if rms.max() == 0 or not len(loud):
        return wave[:0]
    margin = int(rate * margin_s)
    return wave[max(0, loud[0] * frame - margin) : min(len(wave), (loud[-1] + 1) * frame + margin)]


def synthesise(binary: str, voice: Voice, text: str, sample_rate: int) -> np.ndarray:
    """One utterance as float32 at ``sample_rate``, silence trimmed."""
    import soundfile as sf
    import soxr

    with tempfile.TemporaryDirectory(prefix="synth-") as tmp:
        path = Path(tmp) / "say.wav"
        # -w rather than --stdout: the stdout header carries a placeholder length
        subprocess.run([binary, *voice.args(), "-w", str(path), text], check=True, capture_output=True, timeout=30)
        wave, rate = sf.read(path, dtype="float32", always_2d=True)
    wave = wave.mean(axis=1)
    if rate != sample_rate:  # espeak-ng writes 22050 Hz; soxr as in audio_data.load_wave
        wave = soxr.resample(wave, rate, sample_rate)
    return np.clip(trim_silence(wave, sample_rate), -1.0, 1.0).astype(np.float32)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "word"


def read_words(path: str | Path | None) -> list[str]:
    """Words of a file (one per line, '#' comments), or the default list; duplicates dropped."""
    if path is None:
        return list(DEFAULT_WORDS)
    words = [line.split("#", 1)[0].strip().lower() for line in Path(path).read_text().splitlines()]
    return list(dict.fromkeys(w for w in words if w))


def synthesise_words(
    words: list[str], n_voices: int, sample_rate: int, out: str | Path, seed: int = 0, workers: int = 2,
    languages: tuple[str, ...] = DIALECTS, command: str = "",
) -> Path:
    """Every word in ``n_voices`` voices: ``OUT/<word>/<voice>.wav`` (16-bit mono) and ``OUT/manifest.csv``.

    The manifest (path,label,speaker with paths relative to it) is what ``read_manifest`` reads;
    ``OUT/synth.json`` records the words, voices, seed and espeak-ng version. Utterances that come
    out silent are left out of the manifest, with a message.

    Returns:
        The manifest's path.
    """
    binary = espeak_binary()
    langs = available_languages(binary, languages)
    if not langs:
        raise RuntimeError(f"espeak-ng has none of the voices {languages}")
    voices = choose_voices(n_voices, seed, langs, available_variants(binary))
    reserved = sorted({w for w in words if set(w.split()) & RESERVED})
    if reserved:
        print(f"warning: {reserved[:10]} are (or contain) keywords of the real data sets", file=sys.stderr)
    slugs = [slug(w) for w in words]
    if len(set(slugs)) != len(slugs):
        raise ValueError("two words map to the same file name; make them differ in letters or digits")
    out = Path(out)
    jobs = [(w, s, v) for w, s in zip(words, slugs) for v in voices]

    def make(job: tuple[str, str, Voice]) -> dict[str, str] | None:
        word, name, voice = job
        return write_clip(out, name, voice.id, synthesise(binary, voice, word, sample_rate), sample_rate, word, voice.id)

    return run_synthesis(jobs, make, out, workers, binary, {
        "command": command, "seed": seed, "sample_rate": sample_rate, "words": words,
        "voices": [{"id": v.id, "args": v.args()} for v in voices]})


def write_clip(out: Path, name: str, stem: str, wave: np.ndarray, sample_rate: int, word: str,
               speaker: str) -> dict[str, str] | None:
    """``OUT/<name>/<stem>.wav`` (16-bit mono) and its manifest row, or None, with a message, when no
    speech came out (an utterance under 50 ms after trimming)."""
    import soundfile as sf

    if len(wave) < sample_rate * 0.05:
        print(f"skipped {word!r} by {speaker}: no speech came out", file=sys.stderr)
        return None
    path = out / name / f"{stem}.wav"
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, wave, sample_rate, subtype="PCM_16")
    return {"path": f"{name}/{stem}.wav", "label": LABEL_PREFIX + word, "speaker": speaker}


def run_synthesis(jobs: list, make, out: Path, workers: int, binary: str, record: dict) -> Path:
    """``make`` each job on threads; write ``OUT/manifest.csv`` (path,label,speaker) of the clips that came out
    and ``OUT/synth.json`` (``record`` plus the synthesiser's version and the clip count). Returns the manifest."""
    from tqdm import tqdm

    # threads are enough: the work happens in the espeak-ng subprocesses and in soxr (no GIL)
    with ThreadPoolExecutor(max(1, workers)) as pool:
        rows = [r for r in tqdm(pool.map(make, jobs), total=len(jobs), desc="synthesising", unit="clip") if r]
    out.mkdir(parents=True, exist_ok=True)
    manifest = out / "manifest.csv"
    with manifest.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["path", "label", "speaker"])
        writer.writeheader()
        writer.writerows(rows)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
    # the synthesiser's version under its own name ("espeak_ng")
    tool = Path(binary).name.replace("-", "_")
    (out / "synth.json").write_text(json.dumps({**record, tool: version, "clips": len(rows)}, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m app.training.synthesis.speech",
                                     description="synthesise extra training words with espeak-ng (for recall train audio --extra-manifest)")
    parser.add_argument("--words", help=f"file with one word per line (default: {len(DEFAULT_WORDS)} built-in everyday words, no keywords or digits)")
    parser.add_argument("--max-words", type=int, help="only the first N words")
    parser.add_argument("--voices", type=int, default=24, help="voice variants (speakers) per word")
    parser.add_argument("--sample-rate", type=int, default=16000)
    parser.add_argument("--out", required=True, help="output folder: OUT/<word>/<voice>.wav and OUT/manifest.csv")
    parser.add_argument("--seed", type=int, default=0, help="fixes the voices drawn (espeak-ng itself is deterministic)")
    parser.add_argument("--languages", default=",".join(DIALECTS),
                        help="espeak-ng voices reading the words; other languages give accented, misspelt readings")
    parser.add_argument("--workers", type=int, default=2)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    words = read_words(args.words)[: args.max_words]
    manifest = synthesise_words(words, args.voices, args.sample_rate, args.out, args.seed, args.workers,
                                tuple(v for v in args.languages.split(",") if v),
                                command="python -m app.training.synthesis.speech " + shlex.join(argv))
    print(f"{sum(1 for _ in open(manifest)) - 1} clips -> {manifest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
