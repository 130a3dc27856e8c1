"""Realistic binary codes at any volume: real audio windows embedded once, then augmented before the sign.

Recipe (what bench/index/scale.py's JSON reports as ``codes``):

1. **Real windows.** Every clip of ../shared/data (ASC keywords, FSDD digits, ESC-50 sounds) is cut as the
   service cuts audio (1 s windows, 0.5 s hop, silent windows dropped: app/features/windows.py) and run through
   a trained Recall encoder with 256-bit codes (``speech-attn-hash``; the default ``general-audio`` writes 512-bit
   codes). We keep its *pre-sign* code values, the floats whose sign is the code.
2. **Queries** are the exact codes of the windows of every 10th clip, held out of step 3: a query is a real
   window the index has never seen any variant of, as a user's query is.
3. **Volume.** Row r of the set mixes a real window i with one of its 16 nearest real neighbours j (cosine of the
   code values), ``(1 - a) v_i + a v_j`` with a ~ U(0, 0.5), adds Gaussian noise of ``sigma`` times each value's
   standard deviation, and takes the sign. ``sigma`` is calibrated so that a generated code lies as far (median
   Hamming distance) from its source as a real window lies from the next window (0.5 s later) of its own clip:
   a variant is the same sound heard differently, so the 10^8 set is no pile of near-copies of ~10^4 codes.

Rows are independent draws (chunk c from generator seed (seed, c)), so the first n rows of the cached file are a
uniform sample of it: 10^6 and 10^7 are prefixes of the 10^8 set, and a training sample is a prefix too.
The cache (default /tmp/recall-scale) holds the embedded windows and the codes; a rerun reuses both.
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterator

import numpy as np

ENCODER = "speech-attn-hash"
WINDOW_S, HOP_S = 1.0, 0.5
NEIGHBOURS = 16
MIX_MAX = 0.5
CHUNK = 1 << 18  # rows per generated chunk (a file offset unit)
BLOCK = 8192  # rows computed at once
VERSION = 2  # of the generator: part of the cache key
HOLDOUT_EVERY = 10  # every 10th clip's windows are queries, never sources
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
CACHE = Path("/tmp/recall-scale")


# --- 1. real windows -------------------------------------------------------------------------------

def clip_paths(data: Path) -> list[Path]:
    """Every clip of the three audio corpora, in a fixed order."""
    paths: list[Path] = []
    for folder, pattern in (("asc/audio", "*/*.flac"), ("fsdd/recordings", "*.wav"), ("esc50/audio", "*.flac")):
        paths += sorted((data / folder).glob(pattern))
    return paths


def embed_real_windows(data: Path, cache: Path = CACHE, limit: int | None = None) -> Path:
    """Embed every window of ``data``'s clips once; returns the .npz with ``values`` (pre-sign code values),
    ``clip`` (clip number of each window) and a ``source`` description."""
    paths = clip_paths(data)[:limit]
    if not paths:
        raise FileNotFoundError(f"no audio clips under {data}")
    key = hashlib.sha1(repr((ENCODER, WINDOW_S, HOP_S, [str(p) for p in paths])).encode()).hexdigest()[:12]
    out = cache / f"windows-{ENCODER}-{key}.npz"
    if out.is_file():
        return out
    import torch

    from app.encoders.audio.audio_nets import fit_to_window
    from app.encoders.registry import create_encoder, discover
    from app.features.windows import cut_audible_windows
    from app.training.audio.data import Record, load_waves

    encoder = create_encoder(ENCODER, discover())
    waves = load_waves([Record(str(p), "") for p in paths], encoder.sample_rate, cache_dir=cache / "audio")
    values, clips = [], []
    batch: list[np.ndarray] = []
    owners: list[int] = []

    def flush() -> None:  # as the encoder's own encode() fits windows, but keeping the pre-sign values
        fitted = torch.stack([fit_to_window(torch.from_numpy(np.require(w, np.float32, ["W"])), encoder.window) for w in batch])
        _, code_values = encoder.embed_tensor(fitted)
        values.append(code_values.float().cpu().numpy())
        clips.extend(owners)
        batch.clear()
        owners.clear()

    for number, wave in enumerate(waves):
        for w in cut_audible_windows(wave, encoder.sample_rate, WINDOW_S, HOP_S)[0]:
            batch.append(w)
            owners.append(number)
        if len(batch) >= 256:
            flush()
    if batch:
        flush()
    cache.mkdir(parents=True, exist_ok=True)
    source = {"encoder": ENCODER, "bits": int(encoder.bits), "window_s": WINDOW_S, "hop_s": HOP_S, "clips": len(paths),
              "corpora": "../shared/data: asc (keywords), fsdd (digits), esc50 (environmental sounds)"}
    tmp = out.with_suffix(f".{os.getpid()}.tmp.npz")
    np.savez(tmp, values=np.concatenate(values), clip=np.asarray(clips, np.int64), source=json.dumps(source))
    tmp.replace(out)
    return out


# --- 2. and 3. queries, and the augmented set ---------------------------------------------------------

def sign_codes(values: np.ndarray) -> np.ndarray:
    return np.packbits(values > 0, axis=1, bitorder="little")


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise Hamming distances of packed codes (a reference, not a kernel)."""
    return np.unpackbits(a ^ b, axis=1).sum(axis=1)


class Recipe:
    """The real windows split into sources and queries, with each source's neighbours and the noise scale."""

    def __init__(self, values: np.ndarray, clip: np.ndarray, source: dict[str, Any], seed: int = 0) -> None:
        held = clip % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
        self.sources = np.ascontiguousarray(values[~held], np.float32)
        self.source_clip = clip[~held]
        self.query_values = values[held]
        self.seed = seed
        self.std = self.sources.std(axis=0).astype(np.float32) + 1e-6
        self.neighbours = self._neighbours()
        self.sigma, self.calibration = self._calibrate()
        self.source = source

    def _neighbours(self) -> np.ndarray:
        unit = self.sources / (np.linalg.norm(self.sources, axis=1, keepdims=True) + 1e-9)
        out = np.empty((len(unit), NEIGHBOURS), np.int64)
        for start in range(0, len(unit), 2048):
            sims = unit[start : start + 2048] @ unit.T
            sims[np.arange(len(sims)), np.arange(start, start + len(sims))] = -np.inf  # not itself
            out[start : start + 2048] = np.argpartition(-sims, NEIGHBOURS, axis=1)[:, :NEIGHBOURS]
        return out

    def _calibrate(self) -> tuple[float, dict[str, float]]:
        """sigma whose generated codes lie as far from their source as a window from the next window of its clip.

        Two windows 0.5 s apart in one recording are the same sound heard differently; a real window's nearest
        window of *another* clip is no guide (median 2 bits: the encoder gives one spoken keyword nearly one code,
        whoever says it), and calibrating to it would make the volume a pile of copies of ~10^4 codes.
        """
        rng = np.random.default_rng(self.seed + 99)
        codes = sign_codes(self.sources)
        next_same = np.flatnonzero(self.source_clip[:-1] == self.source_clip[1:])
        if len(next_same) == 0:
            raise ValueError("no clip has two windows: nothing to calibrate the noise on")
        target = float(np.median(hamming(codes[next_same], codes[next_same + 1])))
        probe = rng.choice(len(codes), min(300, len(codes)), replace=False)
        nearest = []
        for i in probe:
            d = hamming(codes, codes[i : i + 1]).astype(float)
            d[self.source_clip == self.source_clip[i]] = np.inf
            nearest.append(d.min())
        rows = rng.choice(len(codes), min(4000, len(codes)), replace=False)
        noise = rng.standard_normal((len(rows), self.sources.shape[1])).astype(np.float32) * self.std
        lo, hi = 0.0, 8.0
        for _ in range(20):  # bisection: the median distance grows with sigma
            mid = (lo + hi) / 2
            got = float(np.median(hamming(sign_codes(self.sources[rows] + mid * noise), codes[rows])))
            lo, hi = (mid, hi) if got < target else (lo, mid)
        pairs = rng.integers(0, len(codes), (2, 2000))
        return (lo + hi) / 2, {"target_median_hamming_to_next_window_of_same_clip": target,
                               "median_hamming_real_window_to_nearest_other_clip": float(np.median(nearest)),
                               "median_hamming_random_real_pair": float(np.median(hamming(codes[pairs[0]], codes[pairs[1]])))}

    def queries(self) -> np.ndarray:
        return sign_codes(self.query_values)

    def chunk(self, number: int, rows: int = CHUNK) -> np.ndarray:
        rng = np.random.default_rng([self.seed, number])
        i = rng.integers(0, len(self.sources), rows)
        j = self.neighbours[i, rng.integers(0, NEIGHBOURS, rows)]
        a = rng.uniform(0.0, MIX_MAX, rows).astype(np.float32)[:, None]
        scale = (self.sigma * self.std).astype(np.float32)
        out = np.empty((rows, self.sources.shape[1] // 8), np.uint8)
        noise = np.empty((BLOCK, self.sources.shape[1]), np.float32)
        for s in range(0, rows, BLOCK):  # blocks that stay in cache: twice as fast as whole-chunk arrays
            e = min(rows, s + BLOCK)
            v, w = self.sources[i[s:e]], self.sources[j[s:e]]
            w -= v
            w *= a[s:e]
            v += w  # (1 - a) v_i + a v_j
            rng.standard_normal(out=noise[: e - s], dtype=np.float32)
            noise[: e - s] *= scale
            v += noise[: e - s]
            out[s:e] = sign_codes(v)
        return out

    def key(self) -> str:
        digest = hashlib.sha1(self.sources.tobytes())
        digest.update(repr((VERSION, self.seed, NEIGHBOURS, MIX_MAX, CHUNK, BLOCK, round(self.sigma, 6))).encode())
        return digest.hexdigest()[:12]

    def describe(self) -> dict[str, Any]:
        return {**self.source, "recipe": "bench/index/_audio_codes.py", "source_windows": int(len(self.sources)),
                "query_windows": int(len(self.query_values)), "neighbours": NEIGHBOURS, "mix_weight": f"U(0, {MIX_MAX})",
                "noise_sigma_times_std": round(self.sigma, 4), **self.calibration,
                "queries": f"exact codes of the windows of every {HOLDOUT_EVERY}th clip (held out of the sources)"}


def load_recipe(windows_npz: Path, seed: int = 0) -> Recipe:
    with np.load(windows_npz) as z:
        return Recipe(z["values"], z["clip"], json.loads(str(z["source"])), seed)


_WORKER: Recipe | None = None


def _init_worker(windows_npz: str, seed: int) -> None:
    global _WORKER
    os.nice(19)  # bulk work
    _WORKER = load_recipe(Path(windows_npz), seed)


def _make_chunk(number: int) -> tuple[int, bytes]:
    assert _WORKER is not None
    return number, _WORKER.chunk(number).tobytes()


def codes_file(recipe: Recipe, windows_npz: Path, n: int, cache: Path = CACHE, workers: int = 2) -> Path:
    """A raw file of at least ``n`` codes (row-major, 32 B each at 256 bits), generated once and extended on demand."""
    path = cache / f"codes-{recipe.key()}.u8"
    width = recipe.sources.shape[1] // 8
    cache.mkdir(parents=True, exist_ok=True)
    done = (path.stat().st_size // (CHUNK * width)) if path.is_file() else 0
    wanted = -(-n // CHUNK)
    if done >= wanted:
        return path
    with open(path, "r+b" if path.is_file() else "wb") as f:
        f.truncate(done * CHUNK * width)  # a half-written chunk of an interrupted run goes
        with ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(str(windows_npz), recipe.seed)) as pool:
            for number, data in pool.map(_make_chunk, range(done, wanted)):
                f.seek(number * CHUNK * width)
                f.write(data)
                if number % 16 == 0:
                    print(f"codes: chunk {number + 1}/{wanted}", flush=True)
    return path


def read_codes(path: Path, width: int, start: int, count: int) -> np.ndarray:
    """Rows [start, start + count) of a codes file into ordinary (anonymous) memory."""
    return np.fromfile(path, dtype=np.uint8, count=count * width, offset=start * width).reshape(count, width)


def chunks_of(path: Path, width: int, n: int, rows: int = 1 << 20) -> Iterator[tuple[int, np.ndarray]]:
    for start in range(0, n, rows):
        yield start, read_codes(path, width, start, min(rows, n - start))
