"""Loading a folder the one safe way, and the report ``recall encoders check DIR`` prints.

Order matters: the manifest is read first (JSON only), then every file's sha256 is compared with
it, and only then is anything handed to onnxruntime or the tokenizer; a probe batch finally runs
each model once, so a model whose output does not match the manifest fails here, with the folder
named, and not in a user's first ingest.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.encoders.base import Encoder
from app.encoders.onnx_folder.manifest import FolderError, Manifest, read_manifest, verify_files


def load_folder(folder: str | Path, device: str = "cpu", threads: int = 1,
                load_checkpoint: Callable[[Path], Encoder] | None = None) -> Encoder:
    """The encoder in ``folder``, checked end to end; FolderError (a 422 in the API) for any problem.

    ``load_checkpoint``: the registry's loader of a trained checkpoint directory, for the
    ``checkpoint`` family (passed in: the registry imports this package, not the other way round).
    """
    manifest = read_manifest(folder)
    verify_files(manifest)
    if manifest.family == "checkpoint":
        encoder = _checkpoint(manifest, load_checkpoint)
    elif manifest.family == "onnx-audio":
        from app.encoders.onnx_folder.audio import OnnxAudioEncoder

        encoder = OnnxAudioEncoder(manifest, threads)
    else:
        from app.encoders.onnx_folder.clip import OnnxClipEncoder

        encoder = OnnxClipEncoder(manifest, threads)
    if device != "cpu":
        encoder.to(device)
    probe(encoder, manifest.folder)
    return encoder


def _checkpoint(manifest: Manifest, load_checkpoint: Callable[[Path], Encoder] | None) -> Encoder:
    from app.encoders.checkpoint import CheckpointError

    if load_checkpoint is None:
        raise FolderError(manifest.folder, "unknown_family", "this caller cannot load trained checkpoints")
    try:
        encoder = load_checkpoint(manifest.folder)
    except (CheckpointError, KeyError, ValueError) as exc:
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        raise FolderError(manifest.folder, "checkpoint", f"the checkpoint does not load: {message}") from exc
    if encoder.modality != manifest.modality or encoder.dim != manifest.dim:
        raise FolderError(manifest.folder, "shape", f"the checkpoint embeds {encoder.modality} in {encoder.dim} dimensions; "
                          f"the manifest says {manifest.modality} in {manifest.dim}")
    return encoder


def probe(encoder: Encoder, folder: Path) -> dict[str, float]:
    """Run each model on two inputs; a wrong shape, NaN or a runtime error becomes FolderError. Returns ms per call."""
    timings: dict[str, float] = {}
    rng = np.random.default_rng(0)
    try:
        if encoder.modality == "audio":
            assert encoder.sample_rate and encoder.default_window_s
            samples = int(round(encoder.sample_rate * encoder.default_window_s))
            started = time.perf_counter()
            encoder.encode([(0.1 * rng.standard_normal(samples)).astype(np.float32), np.zeros(samples, np.float32)])
            timings["audio_ms"] = (time.perf_counter() - started) * 1000
        else:
            started = time.perf_counter()
            encoder.encode([rng.integers(0, 256, (64, 48, 3), dtype=np.uint8), np.zeros((32, 32, 3), np.uint8)])
            timings["image_ms"] = (time.perf_counter() - started) * 1000
            if encoder.supports_text:
                started = time.perf_counter()
                encoder.encode_text(["a photo of a dog", ""])
                timings["text_ms"] = (time.perf_counter() - started) * 1000
    except FolderError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the model does wrong, the folder is named
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        kind = "shape" if "shape" in message else "model_run"
        raise FolderError(folder, kind, f"a probe batch failed: {message}") from exc
    return timings


def check_folder(folder: str | Path, device: str = "cpu", load_checkpoint: Callable[[Path], Encoder] | None = None) -> dict[str, Any]:
    """What ``recall encoders check`` reports: the manifest's facts, checksums verified, probe timings."""
    started = time.perf_counter()
    encoder = load_folder(folder, device, load_checkpoint=load_checkpoint)
    m = read_manifest(folder)
    report = {
        "ok": True, "folder": str(m.folder), "name": m.name, "family": m.family, "modality": m.modality,
        "dim": m.dim, "bits": encoder.bits, "licence": m.licence, "source": m.source,
        "version": m.version or m.digest(), "files": sorted(m.files), "device": encoder.device,
        "providers": sorted({p for s in _sessions(encoder) for p in s.get_providers()}),
    }
    if m.custom_ops is not None:  # native code the service will load: say so
        report["custom_ops"] = {"library": m.custom_ops.library, "domains": list(m.custom_ops.domains)}
    if encoder.modality == "audio":
        report.update(sample_rate=encoder.sample_rate, window_s=encoder.default_window_s, hop_s=encoder.default_hop_s,
                      input=getattr(encoder, "input_kind", "waveform"))
    else:
        report.update(image_size=getattr(encoder, "size", None), context_length=getattr(encoder, "context_length", None))
    report["probe_ms"] = {k: round(v, 3) for k, v in probe(encoder, m.folder).items()}
    report["check_s"] = round(time.perf_counter() - started, 3)
    return report


def _sessions(encoder: Encoder) -> list[Any]:
    return [s for s in (getattr(encoder, n, None) for n in ("session", "image_session", "text_session")) if s is not None]
