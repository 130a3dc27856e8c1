"""One upload -> decoded media for a collection's modality, with the configured limits.

Both the ingest and the query use case decode through here, so a query walks one way down
(use case -> media -> features -> encoders -> search) instead of borrowing the ingest module.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.errors import InvalidInput, ServiceError, UnsupportedMedia
from app.media.audio import decode_audio
from app.media.image import decode_image
from app.media.sniff import sniff_modality
from app.settings import LimitSettings


@dataclass
class Upload:
    """One file as received (to ingest, or to search by example)."""

    filename: str
    data: bytes
    id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def item_id(self) -> str:
        return self.id or self.filename


def _wrong_modality(collection_modality: str, upload: Upload) -> ServiceError | None:
    found = sniff_modality(upload.data)
    if collection_modality == "audio" and found == "image":
        return UnsupportedMedia(f"{upload.filename!r} is an image, but this collection holds audio")
    if collection_modality == "image" and found in ("audio", "video"):
        return UnsupportedMedia(f"{upload.filename!r} is {found}, but this collection holds images")
    return None


async def decode_media(
    limits: LimitSettings, modality: str, upload: Upload, *, sample_rate: int | None, query: bool,
) -> np.ndarray:
    """Decode one upload for a collection's modality (on a worker thread), with the configured limits."""
    if not upload.data:
        raise InvalidInput(f"{upload.filename!r} is empty")
    wrong = _wrong_modality(modality, upload)
    if wrong is not None:
        raise wrong
    if modality == "audio":
        assert sample_rate is not None
        return await asyncio.to_thread(
            decode_audio, upload.data, target_rate=sample_rate, filename=upload.filename,
            min_seconds=limits.min_audio_seconds,
            max_seconds=limits.max_query_seconds if query else limits.max_audio_seconds,
        )
    return await asyncio.to_thread(decode_image, upload.data, filename=upload.filename, max_pixels=limits.max_image_pixels)
