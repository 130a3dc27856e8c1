"""What `recall train general-audio` trains on: the corpora's training portions and synthetic speech.

The held-out speakers, words and classes (constants below) are what bench/audio/generalisation.py
scores on, so every manifest here leaves them out; ``without`` leaves a whole corpus out for the
leave-one-corpus-out runs. Synthetic speech: espeak-ng's made-up words in 30 languages and English
everyday words (app/training/synthesis/pseudowords.py, app/training/synthesis/speech.py) and English digits in
many voices. Each file is made once in the work folder and reused by a resumed run.
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

# held out of every training step, scored by bench/audio/generalisation.py
ASC_HOLDOUT_SPEAKERS = ("00000001", "00000005", "00000006", "00000009", "00000011")
ASC_HOLDOUT_WORDS = ("backward", "disable", "five", "next", "open", "right", "start", "up")
FSDD_HOLDOUT_SPEAKERS = ("jackson", "nicolas")
# digit words no step hears from anyone (real or synthetic): English words never trained on, said by
# unseen speakers, are bench/audio/generalisation.py's "unseen words" when the speech branch
# heard every Arabic keyword
FSDD_HOLDOUT_WORDS = ("2", "5", "7", "9")
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
ESC_HOLDOUT_CLASSES = ("chirping_birds", "clapping", "dog", "engine", "hen", "keyboard_typing", "rain", "siren")
CORPORA = ("asc", "fsdd", "esc")
# --head-synthetic: which of synthesise()'s manifests the speech head on the frozen front-end also trains on
HEAD_SYNTHETIC_PARTS = {"none": (), "words": ("pseudo", "synth-en"), "all": ("pseudo", "synth-en", "digits"),
                        "made-up": ("pseudo",), "english": ("synth-en",)}
HEAD_SYNTHETIC = tuple(HEAD_SYNTHETIC_PARTS)
SPEECH_RATE = 8000


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def _write_manifest(path: Path, rows: list[tuple[str, str, str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "label", "speaker"])
        writer.writerows(rows)
    return path


def left_out(without: str | None) -> frozenset[str]:
    """The corpora ``--without`` names (a comma list, stored as given in a checkpoint's config "without"):
    the commercial recipe already leaves ESC-50 out, so its leave-one-corpus-out runs leave two corpora out."""
    return frozenset(part for part in (without or "").split(",") if part)


def without_corpora(text: str) -> str:
    """``--without``'s argparse type: known corpora, at least one kept, written in CORPORA's order (so one set of
    corpora has one spelling in every config)."""
    names = left_out(text.replace(" ", ""))
    unknown = sorted(names - set(CORPORA))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--without takes a comma list of {', '.join(CORPORA)}; got {text!r}")
    if names == set(CORPORA):
        raise argparse.ArgumentTypeError("--without cannot leave every corpus out")
    return ",".join(corpus for corpus in CORPORA if corpus in names)


def training_manifests(data: Path, work: Path, without: str | None) -> dict[str, Path]:
    """Manifests of the training portion of each corpus (held-out speakers, words and classes removed), but for
    the corpora ``without`` names."""
    out, skipped = {}, left_out(without)
    if "asc" not in skipped:
        asc = [(str(data / "asc" / r["file"]), r["keyword"], r["speaker"]) for r in _rows(data / "asc" / "asc.csv")
               if r["keyword"] not in ASC_HOLDOUT_WORDS and r["speaker"] not in ASC_HOLDOUT_SPEAKERS]
        out["asc"] = _write_manifest(work / "asc-train.csv", asc)
    if "fsdd" not in skipped:
        fsdd = [(str(data / "fsdd" / r["file"]), "digit:" + r["digit"], "fsdd:" + r["speaker"])
                for r in _rows(data / "fsdd" / "fsdd.csv")
                if r["speaker"] not in FSDD_HOLDOUT_SPEAKERS and r["digit"] not in FSDD_HOLDOUT_WORDS]
        out["fsdd"] = _write_manifest(work / "fsdd-train.csv", fsdd)
    if "esc" not in skipped:
        esc = [(str(data / "esc50" / r["filename"]), r["category"], "") for r in _rows(data / "esc50" / "esc50.csv")
               if r["category"] not in ESC_HOLDOUT_CLASSES]
        out["esc"] = _write_manifest(work / "esc-train.csv", esc)
    return out


def synthesise(work: Path, args: argparse.Namespace) -> dict[str, Path]:
    from app.training.synthesis.pseudowords import LANGUAGES, synthesise_pseudowords
    from app.training.synthesis.speech import DEFAULT_WORDS, synthesise_words

    pseudo, english = work / "pseudo" / "manifest.csv", work / "synth-en" / "manifest.csv"
    languages = tuple(args.languages.split(",")) if args.languages else LANGUAGES
    if not pseudo.is_file():
        synthesise_pseudowords(pseudo.parent, words_per_language=args.pseudo_words, voices=args.pseudo_voices,
                               sample_rate=SPEECH_RATE, seed=args.seed, languages=languages)
    if not english.is_file():
        synthesise_words(list(DEFAULT_WORDS)[: args.english_words], args.english_voices, SPEECH_RATE, english.parent,
                         seed=args.seed)
    return {"pseudo": pseudo, "synth-en": english, "digits": synthesise_digits(work, args.digit_voices, args.seed)}


def synthesise_digits(work: Path, voices: int, seed: int) -> Path:
    """English digits in many espeak-ng voices, labelled as FSDD labels them ("digit:N") so that a real
    speaker's "three" and a synthetic one's are positives of each other: many voices per word is what two
    real FSDD speakers cannot give. The held-out digit words are not synthesised into training."""
    from app.training.synthesis.speech import synthesise_words

    raw, out = work / "synth-digits" / "manifest.csv", work / "digits-train.csv"
    if not raw.is_file():
        synthesise_words(list(DIGIT_WORDS), voices, SPEECH_RATE, raw.parent, seed=seed)
    rows = []
    for r in _rows(raw):
        digit = str(DIGIT_WORDS.index(r["label"].split(":", 1)[1]))
        if digit not in FSDD_HOLDOUT_WORDS:
            rows.append((str((raw.parent / r["path"]).resolve()), "digit:" + digit, "synth:" + r["speaker"]))
    return _write_manifest(out, rows)
