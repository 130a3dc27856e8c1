"""Demo collections of real media, so the page shows working search at once.

On the first start (``settings.demo``, ``RECALL_DEMO``) with an empty catalog, :func:`seed_demo`
creates three collections from the files shipped in ``app/assets/demo`` (:mod:`app.usecases.demo_data`):
spoken words from several speakers plus long recordings, everyday sounds, and captioned photos.
A service that already holds data is never touched; the page's "load the demo data" button calls
:func:`add_demo_collections`, which adds only the demo collections that are missing. The files go
through the service's own ingest path, exactly like an upload.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from app.errors import BackendError
from app.media.decode import Upload
from app.usecases import demo_data
from app.usecases.ingest import ingest
from app.usecases.services import Services

log = logging.getLogger(__name__)

WORDS_COLLECTION = "demo-words"
AUDIO_COLLECTION = "demo-sounds"
IMAGE_COLLECTION = "demo-images"

# collection -> (manifest key, modality, preferred encoder, description)
DEMO = {
    WORDS_COLLECTION: (demo_data.WORDS, "audio", "speech-attn-hash",
                       "Demo: six Arabic keywords said by five speakers, English digits by four, and three long "
                       "recordings that say some of those words twice. Search with one speaker's word to find the others."),
    AUDIO_COLLECTION: (demo_data.SOUNDS, "audio", "sounds-texture",
                       "Demo: everyday sounds from ESC-10 (dog, rain, crying baby, clock tick, helicopter, crackling fire), "
                       "three recordings each. Search with one to find the other recordings of that sound."),
    IMAGE_COLLECTION: (demo_data.PHOTOS, "image", None,
                       "Demo: COCO photos (CC BY / CC BY-SA) with their captions. Describe one in a sentence to find it."),
}


async def seed_demo(services: Services) -> dict[str, Any]:
    """Create and fill the demo collections when the catalog is empty.

    Returns:
        What was done: ``{"seeded": False}`` when data already existed, otherwise the collection
        names with their item counts and any per-file errors.
    """
    if services.collections:
        log.info("demo: the catalog already has collections; not seeding")
        return {"seeded": False}
    try:
        return await add_demo_collections(services)
    except BackendError as exc:  # a broken install must not stop the service from starting
        log.error("demo: %s", exc.message)
        return {"seeded": False}


async def add_demo_collections(services: Services) -> dict[str, Any]:
    """Create each demo collection that does not exist yet and ingest its files."""
    # one seeding at a time: two clicks on the page's button must not both create a collection
    lock = services.__dict__.setdefault("_demo_lock", asyncio.Lock())
    async with lock:
        return await _add_missing(services)


async def _add_missing(services: Services) -> dict[str, Any]:
    if not (demo_data.DEMO_DIR / demo_data.MANIFEST).is_file():
        raise BackendError(f"the demo media is missing from this installation ({demo_data.DEMO_DIR}); reinstall the package")
    started = time.perf_counter()
    summary: dict[str, Any] = {"seeded": True, "collections": {}}
    for name, (key, modality, preferred, description) in DEMO.items():
        if name in services.collections:
            continue
        # reading the files is disk work: keep it off the event loop
        files = await asyncio.to_thread(demo_data.load, key)
        encoder = await (_image_encoder(services) if modality == "image" else _audio_encoder(services, preferred))
        await services.create_collection({"name": name, "modality": modality, "encoder": encoder, "description": description})
        summary["collections"][name] = await _ingest(services, name, files)
        if modality == "image":
            await _warm_text(services, encoder)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    log.info("demo: seeded %s in %.1f s", summary["collections"], summary["seconds"])
    return summary


async def _ingest(services: Services, name: str, files: list[demo_data.DemoFile]) -> dict[str, Any]:
    uploads = [Upload(f.filename, f.data, id=f.id, metadata=f.metadata) for f in files]
    report = await ingest(services, services.state(name), uploads)
    for row in report.errors:  # shipped media should never fail; say so loudly if it does
        log.error("demo: %s was not indexed: %s", row["file"], row["error"]["message"])
    return {"items": len(report.indexed), "errors": len(report.errors)}


async def _warm_text(services: Services, encoder: str) -> None:
    """Load the sentence model now, so the demo's first text search does not wait for it (seconds)."""
    if not (await services.encoders.load(encoder)).supports_text:
        return
    try:
        await services.encoders.encode_text(encoder, ["a photo"])
    except Exception as exc:  # noqa: BLE001 - the first text search will report it in words
        log.warning("demo: the text side of %s did not load (%s)", encoder, exc)


async def _audio_encoder(services: Services, preferred: str) -> str:
    """The trained encoder made for this kind of sound when it is installed, else the default."""
    if preferred in services.encoders.specs:
        try:
            await services.encoders.load(preferred)
            return preferred
        except Exception as exc:  # noqa: BLE001 - a broken checkpoint must not stop the demo
            log.warning("demo: encoder %s did not load (%s); using the default", preferred, exc)
    return services.settings.encoders.default_audio


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
