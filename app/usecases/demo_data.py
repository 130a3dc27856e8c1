"""Real demo media shipped in ``app/assets/demo``: spoken words, everyday sounds, captioned photos.

The files are small re-encoded copies of licence-compatible public data (credits in
``app/assets/demo/ATTRIBUTION.md``); ``manifest.jsonl`` lists each file with the collection it
goes to, its id and its metadata. :func:`load` reads them for seeding; nothing is generated or
downloaded at run time.

:func:`build` made the folder from the project's data copies and can refresh it
(``python -m app.usecases.demo_data ../shared/data``). It chooses only files whose licence allows
redistribution: Arabic Speech Commands (CC BY 4.0) from the five speakers held out of the
speech encoder's training, Free Spoken Digit Dataset (CC BY-SA 4.0), ESC-50 clips of the ESC-10
subset (CC BY 3.0) and COCO photos whose Flickr licence is CC BY or CC BY-SA.
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

ASSETS = Path(__file__).resolve().parent.parent / "assets"  # app/assets
DEMO_DIR = ASSETS / "demo"
MANIFEST = "manifest.jsonl"
RATE = 16000

WORDS, SOUNDS, PHOTOS = "words", "sounds", "photos"  # the manifest's collection keys

# ASC keywords and speakers (the speech encoder's test speakers: it never heard them)
ASC_WORDS = ("open", "forward", "options", "three", "five", "zero")
ASC_SPEAKERS = ("00000001", "00000005", "00000006", "00000009", "00000011")
# the digits the speech encoder (trained on Arabic) matches best across these speakers; 0-5 it mostly does not
FSDD_DIGITS = (6, 8, 9)
FSDD_SPEAKERS = ("george", "jackson", "lucas", "nicolas")
ESC10_CLASSES = ("dog", "rain", "crying_baby", "clock_tick", "helicopter", "crackling_fire")
ESC10_PER_CLASS = 3
PHOTO_LICENCES = {"Attribution License": "CC BY 2.0", "Attribution-ShareAlike License": "CC BY-SA 2.0"}
# long recordings: (speaker, words in order); the repeated word is what a query should find twice
RECORDINGS = (
    ("00000001", ("open", "three", "forward", "open", "zero")),
    ("00000006", ("five", "options", "zero", "three", "options")),
    ("00000011", ("zero", "forward", "five", "zero", "open", "three")),
)


@dataclass
class DemoFile:
    """One shipped file and the metadata stored with it."""

    filename: str
    data: bytes
    id: str
    metadata: dict[str, Any] = field(default_factory=dict)


def load(collection: str, directory: Path = DEMO_DIR) -> list[DemoFile]:
    """The shipped files of one demo collection (``words``, ``sounds`` or ``photos``), in manifest order."""
    files = []
    for row in _manifest(directory):
        if row["collection"] == collection:
            path = directory / row["file"]
            files.append(DemoFile(path.name, path.read_bytes(), row["id"], row["metadata"]))
    return files


def _manifest(directory: Path) -> list[dict[str, Any]]:
    with (directory / MANIFEST).open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


# --------------------------------------------------------------------------- building the folder


def build(data: Path, out: Path = DEMO_DIR) -> list[dict[str, Any]]:
    """Copy, re-encode and credit the demo files from the data folder ``data`` into ``out``."""
    for sub in (WORDS, SOUNDS, PHOTOS):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True)
    rows = _asc_words(data, out) + _fsdd_digits(data, out) + _asc_recordings(data, out)
    rows += _esc10_sounds(data, out) + _coco_photos(data, out)
    with (out / MANIFEST).open("w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(row, sort_keys=True) + "\n" for row in rows)
    (out / "ATTRIBUTION.md").write_text(_attribution(rows), encoding="utf-8")
    (out / "LICENSES").mkdir(exist_ok=True)
    shutil.copyfile(data / "asc" / "LICENSE", out / "LICENSES" / "arabic-speech-commands-CC-BY-4.0.txt")
    shutil.copyfile(data / "fsdd" / "LICENSE", out / "LICENSES" / "free-spoken-digit-dataset-CC-BY-SA-4.0.txt")
    # the ESC-50 licence statement only: the per-clip credits of the clips used are in ATTRIBUTION.md
    header = (data / "esc50" / "LICENSE").read_text(encoding="utf-8").split("## Licensing/attribution details")[0]
    (out / "LICENSES" / "esc50-esc10-CC-BY-3.0.txt").write_text(header.rstrip() + "\n", encoding="utf-8")
    return rows


def read_mono(path: Path, rate: int = RATE) -> np.ndarray:
    """A file as a mono float32 waveform at ``rate``: channels averaged, soxr resampling, and clipped to
    [-1, 1] as the service's decoder clips (resampling can overshoot a full-scale peak)."""
    import soxr

    wave, source_rate = sf.read(path, dtype="float32", always_2d=True)
    wave = wave.mean(axis=1)
    return np.clip(soxr.resample(wave, source_rate, rate) if source_rate != rate else wave, -1.0, 1.0)


def _flac(path: Path, wave: np.ndarray) -> None:
    sf.write(path, np.clip(wave, -1, 1), RATE, format="FLAC", subtype="PCM_16")


def _asc_rows(data: Path) -> dict[tuple[str, str, int], str]:
    with (data / "asc" / "asc.csv").open() as handle:
        return {(r["keyword"], r["speaker"], int(r["take"])): r["file"] for r in csv.DictReader(handle)}


ASC_CREDIT = {"source": "Arabic Speech Commands", "licence": "CC BY 4.0",
              "credit": "Ghandoura, Hjabo, Al Dakkak (2021), github.com/abdulkaderghandoura/arabic-speech-commands-dataset"}
FSDD_CREDIT = {"source": "Free Spoken Digit Dataset", "licence": "CC BY-SA 4.0",
               "credit": "Jackson et al., github.com/Jakobovski/free-spoken-digit-dataset"}


def _asc_words(data: Path, out: Path) -> list[dict[str, Any]]:
    files, rows = _asc_rows(data), []
    for word in ASC_WORDS:
        for n, speaker in enumerate(ASC_SPEAKERS, 1):
            name = f"{WORDS}/asc-{word}-s{n}.flac"
            _flac(out / name, read_mono(data / "asc" / files[(word, speaker, 1)]))
            label = f'"{word}" in Arabic, speaker {n}'
            rows.append({"collection": WORDS, "file": name, "id": f"{word}-s{n}",
                         "metadata": {"word": word, "speaker": f"asc-{n}", "label": label, **ASC_CREDIT}})
    return rows


def _fsdd_digits(data: Path, out: Path) -> list[dict[str, Any]]:
    rows = []
    for digit in FSDD_DIGITS:
        for speaker in FSDD_SPEAKERS:
            name = f"{WORDS}/fsdd-{digit}-{speaker}.flac"
            _flac(out / name, read_mono(data / "fsdd" / "recordings" / f"{digit}_{speaker}_0.wav"))
            rows.append({"collection": WORDS, "file": name, "id": f"digit-{digit}-{speaker}",
                         "metadata": {"word": str(digit), "speaker": speaker, "label": f'"{digit}" in English, {speaker}', **FSDD_CREDIT}})
    return rows


def _trim(wave: np.ndarray, floor: float = 0.02) -> np.ndarray:
    """The clip without its silent ends (ASC clips are 1 s with the word somewhere inside)."""
    loud = np.flatnonzero(np.abs(wave) > floor * np.abs(wave).max())
    pad = RATE // 20
    return wave[max(0, loud[0] - pad) : loud[-1] + pad] if len(loud) else wave


def _asc_recordings(data: Path, out: Path) -> list[dict[str, Any]]:
    """Long recordings: one speaker's other takes joined with pauses; word times kept as metadata."""
    files, rows = _asc_rows(data), []
    rng = np.random.default_rng(15)
    for n, (speaker, words) in enumerate(RECORDINGS, 1):
        parts, occurrences, clock, takes = [], [], 0.0, {}
        for word in words:
            takes[word] = takes.get(word, 1) + 1  # take 1 is a short clip of its own; use 2, 3, ...
            wave = _trim(read_mono(data / "asc" / files[(word, speaker, takes[word])]))
            pause = np.zeros(int(rng.uniform(1.2, 2.2) * RATE), np.float32)
            start = clock + len(pause) / RATE
            occurrences.append({"word": word, "start": round(start, 2), "end": round(start + len(wave) / RATE, 2)})
            parts += [pause, wave]
            clock = start + len(wave) / RATE
        wave = np.concatenate(parts + [np.zeros(RATE, np.float32)])
        wave = wave + 0.003 * rng.standard_normal(len(wave)).astype(np.float32)  # room noise: no digital silence
        name = f"{WORDS}/recording-{n}.flac"
        _flac(out / name, wave)
        speaker_n = ASC_SPEAKERS.index(speaker) + 1
        label = f"{len(wave) / RATE:.0f} s recording, speaker {speaker_n}: " + ", ".join(f"{o['word']} at {o['start']:.1f} s" for o in occurrences)
        rows.append({"collection": WORDS, "file": name, "id": f"recording-{n}",
                     "metadata": {"speaker": f"asc-{speaker_n}", "label": label, "occurrences": occurrences, **ASC_CREDIT}})
    return rows


def _esc_credits(data: Path) -> dict[str, str]:
    """ESC-50 LICENSE lines '- [1-100032-A.ogg]: clip derived from X (url) by author [CC0]' by clip stem."""
    credits = {}
    for line in (data / "esc50" / "LICENSE").read_text(encoding="utf-8").splitlines():
        match = re.match(r"- \[(\d+-\d+-[A-Z])\.ogg\]: (.*)$", line.strip())
        if match:
            credits[match.group(1)] = match.group(2)
    return credits


def _esc10_sounds(data: Path, out: Path) -> list[dict[str, Any]]:
    credits, rows = _esc_credits(data), []
    with (data / "esc50" / "esc50.csv").open() as handle:
        clips = sorted((r for r in csv.DictReader(handle) if r["esc10"] == "True"), key=lambda r: r["filename"])
    for category in ESC10_CLASSES:
        # distinct source recordings first: two cuts of one recording would make retrieval look easy
        of_class = [r for r in clips if r["category"] == category]
        firsts = list({r["src_file"]: r for r in reversed(of_class)}.values())[::-1]
        chosen = (firsts + [r for r in of_class if r not in firsts])[:ESC10_PER_CLASS]
        for n, row in enumerate(chosen, 1):
            stem = row["orig_filename"].rsplit("-", 1)[0]
            name = f"{SOUNDS}/{category}-{n}.ogg"
            sf.write(out / name, read_mono(data / "esc50" / row["filename"]), RATE, format="OGG", subtype="VORBIS")
            kind = category.replace("_", " ")
            rows.append({"collection": SOUNDS, "file": name, "id": f"{category.replace('_', '-')}-{n}",
                         "metadata": {"kind": kind, "label": f"{kind} (ESC-50 clip {stem})", "source": "ESC-50 (ESC-10 subset)",
                                      "licence": "CC BY 3.0", "credit": f"K. J. Piczak, ESC-50; {credits[stem]}"}})
    return rows


def _coco_photos(data: Path, out: Path) -> list[dict[str, Any]]:
    from PIL import Image

    held_out = set(json.loads((ASSETS / "models" / "image-text-minilm" / "config.json").read_text()).get("held_out_files", []))
    rows = []
    for line in (data / "coco" / "captions.jsonl").read_text(encoding="utf-8").splitlines():
        photo = json.loads(line)
        if photo["license_name"] not in PHOTO_LICENCES:
            continue
        name = f"{PHOTOS}/coco-{photo['coco_id']}.jpg"
        with Image.open(data / "coco" / photo["file"]) as image:
            image.convert("RGB").save(out / name, format="JPEG", quality=82)  # already <= 256 px
        rows.append({"collection": PHOTOS, "file": name, "id": f"coco-{photo['coco_id']}",
                     "metadata": {"caption": photo["captions"][0], "captions": photo["captions"], "label": photo["captions"][0],
                                  "source": "COCO train2017", "licence": PHOTO_LICENCES[photo["license_name"]],
                                  "credit": f"Flickr photo {photo['flickr_url']} (via COCO, cocodataset.org); captions COCO Consortium, CC BY 4.0",
                                  "seen_in_training": photo["file"] not in held_out}})
    return rows


def _attribution(rows: list[dict[str, Any]]) -> str:
    lines = [
        "# Demo media: sources, licences and credits",
        "",
        "Re-encoded copies (16 kHz mono FLAC or Ogg Vorbis; JPEG at most 256 px) made by `python -m app.usecases.demo_data`.",
        "The long recordings `words/recording-*.flac` join other takes of one speaker's words with pauses and faint",
        "noise (an adaptation of CC BY 4.0 material, under the same licence). Licence texts are in `LICENSES/`.",
        "",
        "- Arabic Speech Commands: A. Ghandoura, F. Hjabo, O. Al Dakkak, *Building and Benchmarking an Arabic Speech",
        "  Commands Dataset for Small-Footprint Keyword Spotting*, EAAI 2021. CC BY 4.0.",
        "- Free Spoken Digit Dataset: Z. Jackson et al., https://github.com/Jakobovski/free-spoken-digit-dataset. CC BY-SA 4.0.",
        "- ESC-50: K. J. Piczak, *ESC: Dataset for Environmental Sound Classification*, ACM Multimedia 2015; the ESC-10",
        "  subset is CC BY 3.0; each clip's Freesound source is credited below.",
        "- COCO: T.-Y. Lin et al., *Microsoft COCO: Common Objects in Context*, 2014. Captions CC BY 4.0 (COCO Consortium);",
        "  each photo is under its own Flickr licence (only CC BY 2.0 and CC BY-SA 2.0 photos are included), linked below.",
        "",
        "| file | source | licence | credit |",
        "|---|---|---|---|",
    ]
    for row in rows:
        meta = row["metadata"]
        lines.append(f"| `{row['file']}` | {meta['source']} | {meta['licence']} | {meta['credit'].replace('|', '/')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python -m app.usecases.demo_data ../shared/data
    built = build(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data"))
    print(f"{len(built)} files in {DEMO_DIR}")
