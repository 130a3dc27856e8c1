"""Seed demo collections on the first start, so the page shows working search at once.

Runs in the lifespan when ``settings.demo`` (``RECALL_DEMO``) is true and the catalog has no
collections yet; a service that already holds data is never touched. The media is generated
(:mod:`app.demo_data`) and goes through the service's own ingest path, exactly like an upload.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.demo_data import DemoFile, generated_images, generated_recordings, generated_sounds, generated_speech
from app.ingest import Upload, ingest
from app.services import Services

log = logging.getLogger(__name__)

AUDIO_COLLECTION = "demo-sounds"
IMAGE_COLLECTION = "demo-images"


async def seed_demo(services: Services) -> dict[str, Any]:
    """Create and fill the demo collections when the catalog is empty.

    Returns:
        What was done: ``{"seeded": False}`` when data already existed, otherwise the collection
        names with their item counts and any per-file errors.
    """
    if services.collections:
        log.info("demo: the catalog already has collections; not seeding")
        return {"seeded": False}
    started = time.perf_counter()
    # generation is CPU work (numpy, Pillow, espeak-ng subprocesses): keep it off the event loop
    sounds, images = await asyncio.gather(asyncio.to_thread(_audio_files), asyncio.to_thread(generated_images))
    summary: dict[str, Any] = {"seeded": True, "collections": {}}
    audio = await services.create_collection({
        "name": AUDIO_COLLECTION, "modality": "audio", "encoder": services.settings.encoders.default_audio,
        "description": "Demo: generated tones, chirps, noise bursts and espeak-ng speech; long recordings hide some of them at known times.",
    })
    summary["collections"][audio.name] = await _ingest(services, audio.name, sounds)
    image_encoder = await _image_encoder(services)
    image = await services.create_collection({
        "name": IMAGE_COLLECTION, "modality": "image", "encoder": image_encoder,
        "description": "Demo: procedurally drawn scenes of coloured shapes, each with a caption in its metadata.",
    })
    summary["collections"][image.name] = await _ingest(services, image.name, images)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    log.info("demo: seeded %s in %.1f s", summary["collections"], summary["seconds"])
    return summary


def _audio_files() -> list[DemoFile]:
    return generated_sounds() + generated_recordings() + generated_speech()


async def _ingest(services: Services, name: str, files: list[DemoFile]) -> dict[str, Any]:
    uploads = [Upload(f.filename, f.data, id=f.filename.rsplit(".", 1)[0], metadata=f.metadata) for f in files]
    report = await ingest(services, services.state(name), uploads)
    for row in report.errors:  # generated media should never fail; say so loudly if it does
        log.error("demo: %s was not indexed: %s", row["file"], row["error"]["message"])
    return {"items": len(report.indexed), "errors": len(report.errors)}


async def _image_encoder(services: Services) -> str:
    """The default image encoder, unless it cannot embed text and a checkpoint that can exists.

    Text search is the point of the image demo; the training-free baseline only searches by
    example, so a trained image-text checkpoint is preferred when one is installed.
    """
    default = services.settings.encoders.default_image
    if (await services.encoders.load(default)).supports_text:
        return default
    for name, spec in sorted(services.encoders.specs.items()):
        if spec.modality != "image" or spec.source == "builtin":
            continue
        try:
            if (await services.encoders.load(name)).supports_text:
                return name
        except Exception as exc:  # noqa: BLE001 - a broken checkpoint must not stop the demo
            log.warning("demo: encoder %s did not load (%s); trying the next one", name, exc)
    return default
