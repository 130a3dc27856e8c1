"""Uploads -> decoded media -> windows -> embeddings -> one committed catalog write -> indices.

Files are prepared concurrently (their windows share encoder batches) and committed together;
a file that fails is reported by name with its error while the good ones are kept. Nothing is
acknowledged before its transaction commits.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Callable

import numpy as np

from app.errors import InvalidInput, ServiceError, UnsupportedMedia
from app.features.windows import cut_windows
from app.media.audio import decode_audio
from app.media.image import decode_image
from app.media.sniff import sniff_modality
from app.services import CollectionState, Services
from app.storage.catalog import NewItem

log = logging.getLogger(__name__)

COMMIT_CHUNK = 16  # files per transaction in large batches: progress is visible and durable as it goes
ID_MAX = 512


@dataclass
class Upload:
    """One file to ingest, as received."""

    filename: str
    data: bytes
    id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def item_id(self) -> str:
        return self.id or self.filename


@dataclass
class IngestReport:
    indexed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)


def check_item_id(item_id: str) -> str:
    if not item_id or len(item_id) > ID_MAX or any(ord(ch) < 32 for ch in item_id):
        raise InvalidInput(f"item id {item_id[:40]!r}: use 1-{ID_MAX} printable characters")
    return item_id


def _wrong_modality(collection_modality: str, upload: Upload) -> ServiceError | None:
    found = sniff_modality(upload.data)
    if collection_modality == "audio" and found == "image":
        return UnsupportedMedia(f"{upload.filename!r} is an image, but this collection holds audio")
    if collection_modality == "image" and found in ("audio", "video"):
        return UnsupportedMedia(f"{upload.filename!r} is {found}, but this collection holds images")
    return None


async def decode_media(services: Services, modality: str, upload: Upload, *, sample_rate: int | None, query: bool) -> np.ndarray:
    """Decode one upload for a collection's modality, with the configured limits."""
    if not upload.data:
        raise InvalidInput(f"{upload.filename!r} is empty")
    wrong = _wrong_modality(modality, upload)
    if wrong is not None:
        raise wrong
    limits = services.settings.limits
    if modality == "audio":
        assert sample_rate is not None
        return await asyncio.to_thread(
            decode_audio, upload.data, target_rate=sample_rate, filename=upload.filename,
            min_seconds=limits.min_audio_seconds,
            max_seconds=limits.max_query_seconds if query else limits.max_audio_seconds,
        )
    return await asyncio.to_thread(decode_image, upload.data, filename=upload.filename, max_pixels=limits.max_image_pixels)


async def prepare(services: Services, state: CollectionState, upload: Upload) -> NewItem:
    """Decode, window and encode one file; store its original when the collection keeps media."""
    collection = state.collection
    item_id = check_item_id(upload.item_id)
    encoder = await services.encoders.load(collection.encoder_key)
    media = await decode_media(services, collection.modality, upload, sample_rate=encoder.sample_rate, query=False)
    duration = width = height = None
    if collection.modality == "audio":
        assert encoder.sample_rate and collection.window_s and collection.hop_s
        windows, times = cut_windows(media, encoder.sample_rate, collection.window_s, collection.hop_s)
        duration = len(media) / encoder.sample_rate
    else:
        windows, times = [media], np.zeros((1, 2))
        height, width = media.shape[:2]
    embeddings = await services.encoders.encode(collection.encoder_key, windows)
    media_path = None
    if collection.keep_media:
        media_path = await asyncio.to_thread(services.media.write, collection.name, upload.data, PurePath(upload.filename).suffix)
    return NewItem(
        id=item_id, filename=upload.filename, media_type=PurePath(upload.filename).suffix.lstrip(".").lower() or None,
        media_path=media_path, metadata=upload.metadata, times=times, floats=embeddings.floats, codes=embeddings.codes,
        duration_s=duration, width=width, height=height,
    )


async def ingest(
    services: Services,
    state: CollectionState,
    uploads: list[Upload],
    progress: Callable[[int, list[dict[str, Any]]], None] | None = None,
) -> IngestReport:
    """Ingest files; returns what was indexed and, per failed file, why."""
    report = IngestReport()
    pending = _drop_duplicate_ids(uploads, report)
    for start in range(0, len(pending), COMMIT_CHUNK):
        chunk = pending[start : start + COMMIT_CHUNK]
        prepared = await asyncio.gather(*(prepare(services, state, u) for u in chunk), return_exceptions=True)
        good: list[NewItem] = []
        for upload, result in zip(chunk, prepared):
            if isinstance(result, BaseException):
                report.errors.append(_error_row(upload, result))
            else:
                good.append(result)
        if good:
            name = state.collection.name
            try:
                await services.commit(state, lambda good=good: services.catalog.upsert_items(name, good))
            except BaseException:
                services.media.delete([i.media_path for i in good if i.media_path])
                raise
            services.metrics.ingested.labels(name).inc(len(good))
            report.indexed += [{"id": i.id, "filename": i.filename, "segments": len(i.times)} for i in good]
        if progress is not None:
            progress(min(start + COMMIT_CHUNK, len(pending)), report.errors)
    if report.errors:
        services.metrics.failed.labels(state.collection.name).inc(len(report.errors))
    return report


def _drop_duplicate_ids(uploads: list[Upload], report: IngestReport) -> list[Upload]:
    """Keep the first file of each id; later ones are reported, since which should win is unclear."""
    seen: set[str] = set()
    kept = []
    for upload in uploads:
        if upload.item_id in seen:
            report.errors.append(_error_row(upload, InvalidInput(f"id {upload.item_id!r} appears twice in one request")))
        else:
            seen.add(upload.item_id)
            kept.append(upload)
    return kept


def _error_row(upload: Upload, exc: BaseException) -> dict[str, Any]:
    if not isinstance(exc, ServiceError):
        log.exception("unexpected failure preparing %s", upload.filename, exc_info=exc)
        exc = InvalidInput(f"{upload.filename!r} could not be processed: {type(exc).__name__}")
    return {"file": upload.filename, "id": upload.item_id, "status": exc.status_code, **exc.to_body()}
