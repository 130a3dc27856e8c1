"""Uploads -> decoded media -> windows -> embeddings -> one committed catalog write -> indices.

Files are prepared concurrently (their windows share encoder batches) and committed together;
a file that fails is reported by name with its error while the good ones are kept. Nothing is
acknowledged before its transaction commits. A full or read-only disk is not a per-file problem:
it fails the whole chunk (its stored originals removed, nothing committed) with 507 or 503, and
so does any other 503 (``Unhealthy``: in cluster mode, embedding workers whose Ray head is lost),
which keeps its Retry-After.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Callable

import numpy as np

from app.errors import InsufficientStorage, InvalidInput, ServiceError, Unhealthy
from app.features.windows import cut_audible_windows
from app.media.decode import Upload, decode_media
from app.storage.catalog import NewItem
from app.storage.text_rules import check_item_id, check_text
from app.usecases.services import CollectionState, Services

log = logging.getLogger(__name__)

COMMIT_CHUNK = 16  # files per transaction in large batches: progress is visible and durable as it goes


@dataclass
class IngestReport:
    indexed: list[dict[str, Any]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)


async def prepare(services: Services, state: CollectionState, upload: Upload) -> NewItem:
    """Decode, window and encode one file; store its original when the collection keeps media."""
    collection = state.collection
    item_id = check_item_id(upload.item_id)
    check_text(upload.filename, "filename")
    encoder = await services.encoders.load(collection.encoder_key)
    media = await decode_media(services.settings.limits, collection.modality, upload, sample_rate=encoder.sample_rate, query=False)
    duration = width = height = None
    if collection.modality == "audio":
        assert encoder.sample_rate and collection.window_s and collection.hop_s
        windows, times = cut_audible_windows(media, encoder.sample_rate, collection.window_s, collection.hop_s)
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
    chunks = [pending[start : start + COMMIT_CHUNK] for start in range(0, len(pending), COMMIT_CHUNK)]

    async def prepare_chunk(chunk: list[Upload]) -> list[Any]:
        return await asyncio.gather(*(prepare(services, state, u) for u in chunk), return_exceptions=True)

    # an encoder without a hash head fits the collection's codes on its first vectors: the chunks that
    # fit needs are prepared before the first commit (app/usecases/posthoc_codes.py)
    encoder = await services.encoders.load(state.collection.encoder_key)
    ahead = await services.posthoc.fit_ahead(state.collection, encoder, len(state.index), chunks, prepare_chunk)
    try:
        for index, chunk in enumerate(chunks):
            start = index * COMMIT_CHUNK
            prepared = ahead.pop(index) if index in ahead else await prepare_chunk(chunk)
            await _commit_chunk(services, state, encoder, chunk, prepared, report)
            if progress is not None:
                progress(min(start + COMMIT_CHUNK, len(pending)), report.errors)
    finally:  # chunks prepared for the fit that a failure kept from committing: their stored originals go
        services.media.delete([r.media_path for results in ahead.values() for r in results
                               if isinstance(r, NewItem) and r.media_path])
    if report.errors:
        services.metrics.failed.labels(state.collection.name).inc(len(report.errors))
    return report


async def _commit_chunk(services: Services, state: CollectionState, encoder: Any, chunk: list[Upload],
                        prepared: list[Any], report: IngestReport) -> None:
    """One transaction for a chunk's good files; its bad ones are reported by name."""
    # StorageReadOnly is an Unhealthy: the service, not the file, cannot take it now
    disk = next((r for r in prepared if isinstance(r, (InsufficientStorage, Unhealthy))), None)
    if disk is not None:
        services.media.delete([r.media_path for r in prepared if isinstance(r, NewItem) and r.media_path])
        raise disk
    good: list[NewItem] = []
    for upload, result in zip(chunk, prepared):
        if isinstance(result, BaseException):
            report.errors.append(_error_row(upload, result))
        else:
            good.append(result)
    if not good:
        return
    name = state.collection.name
    # an encoder without a hash head: codes from the collection's PCA + ITQ fit (app/usecases/posthoc_codes.py)
    await services.posthoc.ingest_codes(state.collection, encoder, good, len(state.index))
    try:
        await services.commit(state, lambda: services.catalog.upsert_items(name, good), new_rows=sum(len(i.times) for i in good))
    except BaseException:
        services.media.delete([i.media_path for i in good if i.media_path])
        raise
    services.metrics.ingested.labels(name).inc(len(good))
    report.indexed += [{"id": i.id, "filename": i.filename, "segments": len(i.times)} for i in good]


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
