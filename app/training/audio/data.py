"""Audio training data: manifests, speaker- or class-disjoint splits, and a waveform cache.

A manifest is a CSV with a header naming at least a path and a label column (``path,label``
with optional ``speaker``, ``start``, ``end`` in seconds), or a folder with one sub-folder per
label. Common alternative column names are accepted, so the data sets' own CSVs (``asc.csv``:
file, keyword, speaker; ``esc50.csv``: filename, category) are manifests as they are. Relative
paths resolve against the manifest's folder.
"""

from __future__ import annotations

import csv
import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3"}
PATH_COLUMNS = ("path", "file", "filename")
LABEL_COLUMNS = ("label", "keyword", "category", "digit", "class")


@dataclass(frozen=True)
class Record:
    """One labelled clip: a file, optionally a [start, end) span of it in seconds."""

    path: str
    label: str
    speaker: str = ""
    start: float | None = None
    end: float | None = None


def _pick(header: list[str], names: tuple[str, ...], what: str, source: Path) -> str:
    for name in names:
        if name in header:
            return name
    raise ValueError(f"{source}: no {what} column; expected one of {names}, got {header}")


def read_manifest(source: str | Path) -> list[Record]:
    """Records of a manifest CSV or of a folder with one sub-folder per label.

    Raises:
        ValueError: no path or label column, or an empty manifest.
        FileNotFoundError: the manifest does not exist.
    """
    source = Path(source)
    if source.is_dir():
        records = [
            Record(str(f), label_dir.name)
            for label_dir in sorted(p for p in source.iterdir() if p.is_dir())
            for f in sorted(label_dir.rglob("*"))
            if f.suffix.lower() in AUDIO_SUFFIXES
        ]
    else:
        with source.open(newline="") as handle:
            reader = csv.DictReader(handle)
            header = [h.strip() for h in reader.fieldnames or []]
            path_col = _pick(header, PATH_COLUMNS, "path", source)
            label_col = _pick(header, LABEL_COLUMNS, "label", source)
            records = []
            for row in reader:
                path = Path(row[path_col])
                path = path if path.is_absolute() else source.parent / path
                start, end = row.get("start") or None, row.get("end") or None
                records.append(
                    Record(
                        str(path),
                        str(row[label_col]),
                        str(row.get("speaker") or ""),
                        float(start) if start is not None else None,
                        float(end) if end is not None else None,
                    )
                )
    if not records:
        raise ValueError(f"{source}: no audio records")
    return records


@dataclass(frozen=True)
class Splits:
    train: list[Record]
    val: list[Record]
    test: list[Record]


def split_records(
    records: list[Record], by: str, test_groups: list[str], n_val_groups: int, seed: int, allow_absent: bool = False
) -> Splits:
    """Disjoint train/val/test splits by speaker or by label: no group is in two splits.

    Args:
        by: "speaker" (every clip of a speaker in one split) or "label" (class-disjoint).
        test_groups: groups held out for the final report; never seen in training or validation.
        n_val_groups: groups drawn (seeded) from the rest for per-epoch validation.
        allow_absent: accept held-out groups missing from ``records`` (a pack that already left
            the test set out gives the same train/val split as the full manifest).
    """
    if by not in ("speaker", "label"):
        raise ValueError(f"split by 'speaker' or 'label', not {by!r}")
    group_of = (lambda r: r.speaker) if by == "speaker" else (lambda r: r.label)
    groups = sorted({group_of(r) for r in records})
    if by == "speaker" and groups == [""]:
        raise ValueError("the manifest has no speaker column; split by label instead")
    unknown = sorted(set(test_groups) - set(groups))
    if unknown and not allow_absent:
        raise ValueError(f"held-out {by}s {unknown} are not in the manifest")
    rest = [g for g in groups if g not in set(test_groups)]
    if n_val_groups >= len(rest):
        raise ValueError(f"{n_val_groups} validation {by}s leave none of {len(rest)} for training")
    val = set(np.random.default_rng(seed).choice(rest, size=n_val_groups, replace=False).tolist())
    pick = lambda chosen: [r for r in records if group_of(r) in chosen]  # noqa: E731
    return Splits(
        train=pick(set(rest) - val),
        val=pick(val),
        test=pick(set(test_groups)),
    )


def with_extra_training(splits: Splits, extra: list[Record], by: str, holdout: list[str] | tuple[str, ...] = ()) -> Splits:
    """``splits`` with ``extra`` records (synthetic or other extra data) added to training only.

    Validation and test stay exactly the main manifest's, so their numbers stay comparable with
    a run without extra data. An extra record whose speaker (or label, when split by label) is a
    validation or test group would leak that group into training, so it is refused. ``holdout``
    names the test groups too, for a pack that already left them out (``splits.test`` is empty).

    Raises:
        ValueError: an extra record belongs to a validation or test group.
    """
    group_of = (lambda r: r.speaker) if by == "speaker" else (lambda r: r.label)
    kept_out = {group_of(r) for r in splits.val + splits.test} | set(holdout)
    leaks = sorted({group_of(r) for r in extra} & kept_out)
    if leaks:
        raise ValueError(f"extra data has {by}s {leaks[:5]} that are validation or held-out {by}s of the manifest; "
                         "they must never be trained on")
    return Splits(train=splits.train + list(extra), val=splits.val, test=splits.test)


def load_wave(record: Record, sample_rate: int) -> np.ndarray:
    """Mono float32 waveform of a record at ``sample_rate`` (soxr resampling when needed)."""
    import soundfile as sf

    wave, rate = sf.read(record.path, dtype="float32", always_2d=True)
    wave = wave.mean(axis=1)
    if record.start is not None or record.end is not None:
        first = int(round((record.start or 0.0) * rate))
        last = int(round(record.end * rate)) if record.end is not None else len(wave)
        wave = wave[first:last]
    if rate != sample_rate:
        import soxr

        wave = soxr.resample(wave, rate, sample_rate)
    return np.ascontiguousarray(wave, dtype=np.float32)


def load_waves(records: list[Record], sample_rate: int, cache_dir: str | Path | None = None) -> list[np.ndarray]:
    """Waveforms of ``records``; with ``cache_dir``, decoded once and then memory-mapped.

    The cache key hashes the paths, spans and rate, so a changed manifest never reads stale audio.
    """
    if cache_dir is None:
        return [load_wave(r, sample_rate) for r in records]
    key = hashlib.sha1(repr((sample_rate, [(r.path, r.start, r.end) for r in records])).encode()).hexdigest()[:16]
    cache = Path(cache_dir)
    data_path, offsets_path = cache / f"waves-{key}.npy", cache / f"offsets-{key}.npy"
    if not (data_path.is_file() and offsets_path.is_file()):
        from tqdm import tqdm

        waves = [load_wave(r, sample_rate) for r in tqdm(records, desc="decoding audio", unit="file")]
        offsets = np.cumsum([0] + [len(w) for w in waves]).astype(np.int64)
        cache.mkdir(parents=True, exist_ok=True)
        joined = np.concatenate(waves) if waves else np.zeros(0, np.float32)
        # temporary names of this call's own: two trainings started together decode the same manifest, and a
        # shared name let one move the other's half-written file away (FileNotFoundError in the second).
        # Offsets land first, the data last, so a reader that finds both finds them whole.
        for target, array in ((offsets_path, offsets), (data_path, joined)):
            temporary = target.with_name(f"{target.stem}.{os.getpid()}-{uuid.uuid4().hex}.tmp.npy")
            np.save(temporary, array)
            temporary.replace(target)
    data = np.load(data_path, mmap_mode="r")
    offsets = np.load(offsets_path)
    return [np.asarray(data[offsets[i] : offsets[i + 1]]) for i in range(len(records))]


# ---- packs: records and audio in one numpy file -----------------------------------------------
# A machine without the data folder or an audio decoder (the GPU image has neither soundfile nor
# soxr) trains from a pack. Audio is stored as 8-bit mu-law (telephone quality, ~38 dB SNR) so a
# pack of a few thousand clips fits a transfer limit; training adds noise at 10-30 dB SNR anyway.
MU = 255.0


def mu_law_encode(wave: np.ndarray) -> np.ndarray:
    x = np.clip(wave, -1.0, 1.0)
    y = np.sign(x) * np.log1p(MU * np.abs(x)) / np.log1p(MU)
    return np.round((y + 1) / 2 * MU).astype(np.uint8)


def mu_law_decode(codes: np.ndarray) -> np.ndarray:
    y = codes.astype(np.float32) / MU * 2 - 1
    return (np.sign(y) * np.expm1(np.abs(y) * np.log1p(MU)) / MU).astype(np.float32)


def write_pack(path: str | Path, records: list[Record], waves: list[np.ndarray], sample_rate: int) -> Path:
    """Save records (paths as given) and their mu-law audio to one compressed ``.npz``."""
    offsets = np.cumsum([0] + [len(w) for w in waves]).astype(np.int64)
    np.savez_compressed(
        path,
        audio=mu_law_encode(np.concatenate(waves)),
        offsets=offsets,
        paths=np.array([r.path for r in records]),
        labels=np.array([r.label for r in records]),
        speakers=np.array([r.speaker for r in records]),
        sample_rate=np.array(sample_rate),
    )
    return Path(path)


def read_pack(path: str | Path, sample_rate: int) -> tuple[list[Record], list[np.ndarray]]:
    """Records and decoded waveforms of a pack; its rate must be the one asked for."""
    pack = np.load(path)
    if int(pack["sample_rate"]) != sample_rate:
        raise ValueError(f"{path}: pack is at {int(pack['sample_rate'])} Hz, training asks for {sample_rate}")
    audio, offsets = mu_law_decode(pack["audio"]), pack["offsets"]
    records = [Record(str(p), str(l), str(s)) for p, l, s in zip(pack["paths"], pack["labels"], pack["speakers"])]
    return records, [audio[offsets[i] : offsets[i + 1]] for i in range(len(records))]


def main(argv: list[str] | None = None) -> int:
    """`python -m app.training.audio.data MANIFEST RATE OUT [--drop GROUPS]`: write a pack."""
    import argparse

    parser = argparse.ArgumentParser(description="pack a manifest's audio for a machine without the data")
    parser.add_argument("manifest")
    parser.add_argument("sample_rate", type=int)
    parser.add_argument("out")
    parser.add_argument("--drop", default="", help="comma-separated speakers or labels to leave out (the test set)")
    args = parser.parse_args(argv)
    drop = {d for d in args.drop.split(",") if d}
    records = [r for r in read_manifest(args.manifest) if r.speaker not in drop and r.label not in drop]
    write_pack(args.out, records, load_waves(records, args.sample_rate), args.sample_rate)
    print(f"{len(records)} clips -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
