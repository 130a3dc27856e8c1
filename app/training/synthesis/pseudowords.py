"""Made-up words read by espeak-ng in many languages: a vocabulary nobody has, for the default audio encoder.

Why: query-by-example must match words the encoder never heard. Real keyword sets are small (40
Arabic keywords, 10 English digits), so a model trained on them learns those words. Pseudo-words
(random consonant-vowel strings such as ``tavoku``) read by each language's letter-to-sound rules
give thousands of distinct spoken forms, in the phonetics of 25+ languages, each said by several
voices (variant, pitch, speed). The label is language + spelling, so "the same word" means the
same pronunciation, and the model learns to compare sound sequences rather than recognise words.

Arabic is left out on purpose, and so is every real keyword and digit of the evaluation data: the
unseen-words and leave-one-corpus-out evaluations (bench/audio/generalisation.py) stay clean.

    python -m app.training.synthesis.pseudowords --out .gpu/pseudo --words-per-language 40 --voices 6
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import numpy as np

from app.training.synthesis.speech import (PITCH, RESERVED, SPEED, Voice, available_languages, available_variants,
                                       espeak_binary, run_synthesis, synthesise)

# Languages written in the Latin alphabet, so the same spelling is read by each one's own rules.
LANGUAGES = ("af", "ca", "cs", "cy", "da", "de", "en-gb", "en-us", "es", "et", "eu", "fi", "fr-fr", "hr", "hu",
             "id", "is", "it", "lt", "lv", "nl", "pl", "pt", "ro", "sk", "sl", "sq", "sv", "sw", "tr")
CONSONANTS = "bdfgklmnprstvz"
VOWELS = "aeiou"
LABEL_PREFIX = "pw:"


def pseudo_words(n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct made-up words of 2-3 consonant-vowel syllables, some with a closing consonant."""
    words: dict[str, None] = {}
    while len(words) < n:
        syllables = int(rng.integers(2, 4))
        word = "".join(rng.choice(list(CONSONANTS)) + rng.choice(list(VOWELS)) for _ in range(syllables))
        if rng.random() < 0.3:
            word += rng.choice(list(CONSONANTS))
        if word not in RESERVED:
            words[word] = None
    return list(words)


def synthesise_pseudowords(out: str | Path, words_per_language: int = 40, voices: int = 6, sample_rate: int = 8000,
                           seed: int = 0, workers: int = 2, languages: tuple[str, ...] = LANGUAGES,
                           command: str = "") -> Path:
    """``OUT/<lang>/<word>/<voice>.wav`` and ``OUT/manifest.csv`` (path,label,speaker).

    Every language gets its own words (drawn from ``seed``); each word is said by ``voices`` voices
    of that language (a variant, a pitch and a speed each). The speaker column is the voice id.
    """
    import soundfile as sf

    binary = espeak_binary()
    langs = available_languages(binary, languages)
    variants = available_variants(binary)
    if not langs:
        raise RuntimeError(f"espeak-ng has none of the voices {languages}")
    rng = np.random.default_rng(seed)
    out = Path(out)
    jobs = []
    for lang in langs:
        for word in pseudo_words(words_per_language, rng):
            for variant in rng.choice(variants, size=voices, replace=len(variants) < voices):
                voice = Voice(lang, str(variant), int(rng.integers(PITCH[0], PITCH[1] + 1)),
                              int(rng.integers(SPEED[0], SPEED[1] + 1)))
                jobs.append((lang, word, voice))

    def make(job: tuple[str, str, Voice]) -> dict[str, str] | None:
        lang, word, voice = job
        wave = synthesise(binary, voice, word, sample_rate)
        if len(wave) < sample_rate * 0.1:
            return None
        rel = f"{lang}/{word}/{voice.id}.wav"
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        sf.write(out / rel, wave, sample_rate, subtype="PCM_16")
        return {"path": rel, "label": f"{LABEL_PREFIX}{lang}:{word}", "speaker": voice.id}

    return run_synthesis(jobs, make, out, workers, binary, {"command": command, "seed": seed, "sample_rate": sample_rate,
                                                             "languages": langs})


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m app.training.synthesis.pseudowords",
                                     description="made-up words read by espeak-ng in many languages and voices")
    parser.add_argument("--out", required=True)
    parser.add_argument("--words-per-language", type=int, default=40)
    parser.add_argument("--voices", type=int, default=6, help="voices per word")
    parser.add_argument("--sample-rate", type=int, default=8000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--languages", default=",".join(LANGUAGES))
    parser.add_argument("--workers", type=int, default=2)
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    manifest = synthesise_pseudowords(args.out, args.words_per_language, args.voices, args.sample_rate, args.seed,
                                      args.workers, tuple(v for v in args.languages.split(",") if v),
                                      command="python -m app.training.synthesis.pseudowords " + shlex.join(argv))
    print(f"{sum(1 for _ in open(manifest)) - 1} clips -> {manifest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
