"""Collections for the query-path benchmark: 10^5 audio windows and 10^5 images, built once.

Encoding 10^5 windows costs minutes on two shared cores and does not change what a query costs,
so (as ``bench_image_text`` does) a few thousand real clips are encoded with the service's
*default* encoders and tiled to the target size with small perturbations: the floats get noise
and are renormalised, the codes get a few flipped bits, so every row is distinct and the index
scans, shortlists and heaps do the same work they would on real data. Rows go straight into the
catalog; the server rebuilds its indices from it when it starts, as after any restart.

The built data directory is cached under ``--cache`` keyed by encoder names and sizes (a new
default encoder gets a new corpus) and copied for each run, so runs never see each other's writes.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import time
from pathlib import Path

import numpy as np
import soundfile as sf

AUDIO_COLLECTION = "clips"
IMAGE_COLLECTION = "img"
CLIP_RATE = 16000


def synthetic_clip(rng: np.random.Generator, seconds: float = 1.0, rate: int = CLIP_RATE) -> np.ndarray:
    """Speech-like noise: a few tone and noise bursts with pauses (deterministic per rng)."""
    n = int(seconds * rate)
    wave = 0.01 * rng.standard_normal(n)
    t = int(rng.uniform(0, 0.1) * rate)
    while t < n:
        length = min(int(rng.uniform(0.08, 0.4) * rate), n - t)
        freq = rng.uniform(150, 3000)
        burst = np.sin(2 * np.pi * (freq + rng.uniform(-50, 50) * np.arange(length) / rate) * np.arange(length) / rate)
        if rng.random() < 0.3:
            burst = rng.standard_normal(length) * 0.5
        wave[t : t + length] += 0.2 * burst * np.hanning(length)
        t += length + int(rng.uniform(0.03, 0.2) * rate)
    return np.clip(wave, -1, 1).astype(np.float32)


def wav_bytes(wave: np.ndarray, rate: int = CLIP_RATE, channels: int = 1, fmt: str = "WAV", subtype: str | None = "PCM_16") -> bytes:
    data = np.repeat(wave[:, None], channels, axis=1) if channels > 1 else wave
    buf = io.BytesIO()
    sf.write(buf, data, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _tile(floats: np.ndarray, codes: np.ndarray, n: int, rng: np.random.Generator, flip: float = 0.03) -> tuple[np.ndarray, np.ndarray]:
    """``n`` perturbed copies of the real rows (the first rows are the real ones unchanged)."""
    pick = np.concatenate([np.arange(len(floats)), rng.integers(0, len(floats), max(0, n - len(floats)))])[:n]
    out_f = floats[pick] + np.where(np.arange(n)[:, None] < len(floats), 0.0, 0.05 * rng.standard_normal((n, floats.shape[1])))
    out_f = (out_f / np.linalg.norm(out_f, axis=1, keepdims=True)).astype(np.float32)
    bits = np.unpackbits(codes[pick], axis=1, bitorder="little")
    flips = (rng.random(bits.shape) < flip) & (np.arange(n)[:, None] >= len(floats))
    out_c = np.packbits(bits ^ flips, axis=1, bitorder="little")
    return out_f, out_c


def _write(catalog, name: str, floats: np.ndarray, codes: np.ndarray, times: np.ndarray, prefix: str) -> None:
    from app.storage.catalog import NewItem

    for start in range(0, len(floats), 10_000):
        stop = min(len(floats), start + 10_000)
        catalog.upsert_items(name, [
            NewItem(id=f"{prefix}{j}", filename=f"{prefix}{j}.wav" if prefix == "c" else None, media_type=None,
                    media_path=None, metadata={"group": j % 10}, times=times, floats=floats[j : j + 1], codes=codes[j : j + 1],
                    duration_s=float(times[0, 1]) if prefix == "c" else None)
            for j in range(start, stop)
        ])


def build(data_dir: Path, audio_encoder: str, image_encoder: str, n_audio: int, n_images: int, n_real: int = 3000) -> dict:
    """Create both collections in a fresh catalog under ``data_dir``."""
    import torch

    from app.encoders import registry
    from app.storage.catalog import Catalog, Collection
    from app.training.synthesis.images import generate_scenes, render

    torch.set_num_threads(2)
    specs = registry.discover()
    rng = np.random.default_rng(0)
    catalog = Catalog(data_dir / "catalog.sqlite3")
    info: dict = {}

    enc = registry.create_encoder(audio_encoder, specs)
    window_s, hop_s = enc.default_window_s or 1.0, enc.default_hop_s or 0.5
    clips = [synthetic_clip(rng) for _ in range(n_real)]
    import soxr

    waves = [soxr.resample(c, CLIP_RATE, enc.sample_rate).astype(np.float32) for c in clips]
    t = time.perf_counter()
    emb = enc.encode(waves)
    info["audio_real_encode_s"] = time.perf_counter() - t
    floats, codes = _tile(emb.floats, emb.codes, n_audio, rng)
    catalog.create_collection(Collection(
        name=AUDIO_COLLECTION, modality="audio", encoder=enc.name, index_kinds=("binary", "float"), dim=enc.dim,
        bits=enc.bits, window_s=window_s, hop_s=hop_s, keep_media=False, description="bench", created_at=time.time(),
        encoder_version=enc.version))
    _write(catalog, AUDIO_COLLECTION, floats, codes, np.asarray([[0.0, 1.0]]), "c")

    if n_images:
        img = registry.create_encoder(image_encoder, specs)
        scenes = generate_scenes(300, seed=77)
        emb = img.encode([render(s) for s in scenes])
        floats, codes = _tile(emb.floats, emb.codes, n_images, rng)
        catalog.create_collection(Collection(
            name=IMAGE_COLLECTION, modality="image", encoder=img.name, index_kinds=("binary", "float"), dim=img.dim,
            bits=img.bits, window_s=None, hop_s=None, keep_media=False, description="bench", created_at=time.time(),
            encoder_version=img.version))
        _write(catalog, IMAGE_COLLECTION, floats, codes, np.zeros((1, 2)), "t")
    catalog.close()
    info.update(audio_encoder=enc.name, image_encoder=image_encoder, audio_windows=n_audio, images=n_images, real_audio_clips=n_real)
    return info


def _checkpoint_digest(name: str) -> str:
    """Changes when the named encoder's weights change (a retrained default gets a new corpus)."""
    from app.encoders import registry

    spec = registry.discover().get(name)
    weights = Path(spec.source) / "weights.safetensors" if spec is not None else None
    if weights is not None and weights.is_file():
        return hashlib.sha1(weights.read_bytes()).hexdigest()[:10]
    return "builtin"


def prepared(cache: Path, audio_encoder: str, image_encoder: str, n_audio: int, n_images: int, dest: Path) -> dict:
    """Copy a (cached) corpus into ``dest``; build it first when the cache lacks it."""
    key = f"{audio_encoder}-{_checkpoint_digest(audio_encoder)}-{n_audio}-{image_encoder}-{n_images}"
    src = cache / key
    if not (src / "done.json").exists():
        shutil.rmtree(src, ignore_errors=True)
        src.mkdir(parents=True)
        info = build(src, audio_encoder, image_encoder, n_audio, n_images)
        (src / "done.json").write_text(json.dumps(info))
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return json.loads((src / "done.json").read_text())
