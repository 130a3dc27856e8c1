"""Everything the lifespan builds, and the collection-level operations routes call.

Routes stay thin: they parse HTTP and call these methods, which raise domain errors.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.encoders.image_text.text_features import set_query_precision
from app.features.pretrained.ort_convs import set_precision as set_frontend_precision
from app.encoders.registry import discover
from app.encoders.runtime import configure_torch
from app.errors import Conflict, InsufficientStorage, InvalidInput, NotFound, StorageReadOnly
from app.index import IndexSpec, warm_up_hamming_kernels
from app.metrics import Metrics
from app.search.pipeline import Scans
from app.search.scan import SharedScan
from app.settings import Settings
from app.storage.disk_errors import disk_errors
from app.storage.index_store import CollectionIndex
from app.storage.media_store import MediaStore
from app.storage.protocol import open_catalog
from app.storage.records import Collection, WriteResult
from app.storage.text_rules import check_text
from app.usecases.open_gate import OpenGate
from app.usecases.posthoc_codes import PostHocCodes
from app.worker.encoding import EncoderPool

log = logging.getLogger(__name__)

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
INDEX_KINDS = ("binary", "float")


@dataclass
class CollectionState:
    """A loaded collection: definition, indices, shared scanners and its write lock."""

    collection: Collection
    index: CollectionIndex
    scans: Scans
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


def index_spec(request: dict[str, Any] | None, kinds: tuple[str, ...]) -> IndexSpec:
    """A collection's index choice from its create request; InvalidInput (422) when it cannot work."""
    try:
        spec = IndexSpec.from_json(request)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if spec.kind == "ivf" and "binary" not in kinds:
        raise InvalidInput("index kind 'ivf' indexes binary codes; this collection has no binary index (index_kinds)")
    if spec.floats == "mmap" and "float" not in kinds:
        raise InvalidInput("index floats 'mmap' maps the float vectors to a file; this collection has no float index (index_kinds)")
    return spec


def _describe_index(state: CollectionState) -> dict[str, Any]:
    """Which index answers binary searches (an in-process index says; a cluster facade reports its kind)."""
    describe = getattr(state.index, "describe_index", None)
    found = describe() if describe is not None else None
    if found is None:  # a float-only collection (no binary index), or cluster shards (each answers for itself)
        found = {**state.collection.index_spec.to_json(), "answering": None}
    # the setting as created, apart from the shape the index has now (an automatic nlist grows): what reembed copies
    return {**found, "setting": state.collection.index_spec.to_json()}


class Services:
    """Catalog, encoders, indices and batchers of one running service."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.data_dir = Path(settings.data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.catalog = open_catalog(settings.catalog_url, self.data_dir)
        # cluster mode: other API processes write to the same catalog (see app/usecases/follower.py)
        self.shared = settings.catalog_url is not None
        self.retired: list[CollectionState] = []
        self.open_gate = OpenGate()  # one opener per collection; a Ray rejoin closes it (app/usecases/open_gate.py)
        self._follow_task: asyncio.Task | None = None
        self.media = MediaStore(self.data_dir / "media")
        self.index_dir = self.data_dir / "indices"
        self.metrics = Metrics()
        onnx_dirs = [settings.encoders.onnx_dir] if settings.encoders.onnx_dir else []
        pool_args = (discover(settings.encoders.extra_dirs, onnx_dirs), settings.resolved_device(), settings.batching)
        self.posthoc = PostHocCodes(self.data_dir / "posthoc", settings.encoders.posthoc_fit_vectors)
        if settings.ray_address and settings.cluster.embed_workers:
            from app.cluster.embedding import RayEncoderPool  # ingest encodes on Ray workers (cluster mode)

            self.encoders: EncoderPool = RayEncoderPool(
                *pool_args, on_batch=self.metrics.observe_batch, ray_address=settings.ray_address,
                workers=settings.cluster.embed_workers, cpus=settings.cluster.embed_cpus,
                extra_dirs=settings.encoders.all_dirs(), torch_threads=settings.torch_threads,
            )
        else:
            self.encoders = EncoderPool(*pool_args, on_batch=self.metrics.observe_batch)
        self.collections: dict[str, CollectionState] = {}
        self.encoder_problems: dict[str, str] = {}  # ONNX folders that failed to load at start, and why
        self.not_ready: list[str] = ["starting"]
        self.loaded = False  # set once encoders, indices, jobs (and demo data) are ready
        self.started_at = time.time()

    # --- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the encoders collections use and every collection's indices."""
        self.not_ready = ["loading encoders and indices"]
        configure_torch(self.settings.torch_threads)
        set_query_precision(self.settings.encoders.text_query_precision)  # before any encoder embeds a query
        set_frontend_precision(self.settings.encoders.audio_frontend_precision)
        # The Hamming kernels are compiled on first use (seconds; milliseconds from numba's
        # on-disk cache): pay for it here, not in the first user's query.
        await asyncio.to_thread(warm_up_hamming_kernels)
        wanted = {self.settings.encoders.default_audio, self.settings.encoders.default_image, *self.settings.encoders.preload}
        for collection in self.catalog.list_collections():
            wanted.add(collection.encoder_key)
            self.collections[collection.name] = await asyncio.to_thread(self._open_collection, collection)
        problems = []
        for name in sorted(wanted):
            try:
                encoder = await self.encoders.load(name)
                if encoder.supports_text:
                    # the sentence encoder loads lazily; pay for it here, not in the first user's query
                    await self.encoders.encode_text(name, ["warm up"])
                elif encoder.modality == "audio" and encoder.sample_rate and encoder.default_window_s:
                    # a trained audio model traces itself on its first CPU batch (~0.5 s: app/encoders/traced.py);
                    # called directly, not through the batcher, so no batch is counted in the metrics
                    silence = np.zeros(int(round(encoder.sample_rate * encoder.default_window_s)), np.float32)
                    await asyncio.to_thread(encoder.encode, [silence])
            except Exception as exc:  # noqa: BLE001 - readiness reports it instead of crashing
                log.exception("encoder %s failed to load", name)
                problems.append(f"encoder {name!r} failed to load: {exc}")
        await self._load_onnx_folders(wanted)
        if self.shared:
            from app.usecases.follower import follow

            self._follow_task = asyncio.get_running_loop().create_task(follow(self))
        self.not_ready = problems

    async def _load_onnx_folders(self, loaded: set[str]) -> None:
        """Bring-your-own ONNX folders load at start too (checksums, onnxruntime, a probe), so a broken one is
        reported now, in the log and in GET /v1/encoders, rather than to the first user who names it. Unlike
        an encoder a collection uses, a broken one does not make the service unready."""
        for name, spec in sorted(self.encoders.specs.items()):
            if spec.info is None or "@" in name or name in loaded or name in self.encoder_problems:
                continue
            try:
                await self.encoders.load(name)
            except Exception as exc:  # noqa: BLE001 - one bad folder never stops the start
                log.warning("encoder %s not usable: %s", name, exc)
                self.encoder_problems[name] = str(exc)

    async def stop(self) -> None:
        from app.worker.tasks import cancel_and_wait

        await cancel_and_wait(self._follow_task)
        await self.encoders.stop()
        for state in [*self.collections.values(), *self.retired]:
            await self.close_state(state)
            if state.index.unsnapshotted and not self.shared:
                self._snapshot(state.index)
        self.catalog.close()

    async def close_state(self, state: CollectionState) -> None:
        for scan in (state.scans.binary, state.scans.float):
            if scan is not None:
                await scan.stop()
        close = getattr(state.index, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    def _open_collection(self, collection: Collection) -> CollectionState:
        if self.shared:
            from app.cluster.backends import open_shared_index

            index = open_shared_index(self.settings, self.catalog, collection)
        else:
            index = CollectionIndex.open(collection, self.catalog, self.index_dir, self.settings.index.shards,
                                         auto_windows=self.settings.index.auto_ivf_windows)
            if index.unsnapshotted:
                self._snapshot(index)
        scans = Scans(
            binary=SharedScan(index.binary, f"{collection.name}:binary") if index.binary is not None else None,
            float=SharedScan(index.float, f"{collection.name}:float") if index.float is not None else None,
        )
        return CollectionState(collection, index, scans)

    # --- collections ----------------------------------------------------------------------

    def state(self, name: str) -> CollectionState:
        if not NAME_PATTERN.fullmatch(name):  # never created, so no lookup (PostgreSQL cannot even compare a NUL)
            raise NotFound(f"no collection named {name[:70]!r}; GET /v1/collections lists them")
        if self.shared:
            from app.usecases import follower
            from app.usecases.follower import CollectionOpening, sync_collection

            # Request paths call this on the event loop: a long opening of this collection (shard actors
            # building their partitions, minutes at 10^7 windows) must not stall every route of the process,
            # /healthz included. The usual holder is one indexed catalog query, so a short wait covers it.
            with self.open_gate.collection(name, follower.SYNC_WAIT_S) as admitted:
                if not admitted:
                    raise CollectionOpening(name)
                sync_collection(self, name)
        if name not in self.collections:
            raise NotFound(f"no collection named {name!r}; GET /v1/collections lists them")
        return self.collections[name]

    async def create_collection(self, request: dict[str, Any]) -> Collection:
        name = request["name"]
        if not NAME_PATTERN.fullmatch(name):  # fullmatch: `$` alone lets a trailing newline through
            raise InvalidInput(f"collection name {name!r}: use 1-64 letters, digits, '_', '-' or '.', starting with a letter or digit")
        if name in self.collections:
            raise Conflict(f"collection {name!r} already exists")
        modality = request["modality"]
        encoder_name = request.get("encoder") or (
            self.settings.encoders.default_audio if modality == "audio" else self.settings.encoders.default_image
        )
        encoder = await self.encoders.load(encoder_name)
        if encoder.modality != modality:
            raise InvalidInput(f"encoder {encoder_name!r} embeds {encoder.modality}, not {modality}")
        kinds = tuple(request.get("index_kinds") or INDEX_KINDS)
        spec = index_spec(request.get("index"), kinds)
        window_s = hop_s = None
        if modality == "audio":
            window_s = float(request.get("window_s") or encoder.default_window_s or 1.0)
            hop_s = float(request.get("hop_s") or encoder.default_hop_s or window_s / 2)
            fixed = getattr(encoder, "fixed_window_s", None)  # an ONNX model exported for one window length
            if fixed is not None and abs(window_s - fixed) > 1e-9:
                raise InvalidInput(f"encoder {encoder_name!r} takes windows of exactly {fixed} s; omit window_s or pass {fixed}")
            if hop_s > window_s:
                raise InvalidInput(f"hop_s ({hop_s}) must not exceed window_s ({window_s}): audio between windows would never be indexed")
        collection = Collection(
            name=name, modality=modality, encoder=encoder.name, index_kinds=kinds, dim=encoder.dim, bits=encoder.bits,
            window_s=window_s, hop_s=hop_s,
            keep_media=self.settings.keep_media if request.get("keep_media") is None else bool(request["keep_media"]),
            description=check_text(request.get("description"), "description") or "", created_at=time.time(), encoder_version=encoder.version,
            index_spec=spec,
        )
        if self.shared:
            from app.cluster.backends import ensure_openable

            await asyncio.to_thread(ensure_openable, self.settings)  # Ray shards, head lost: 503, nothing written
        self.catalog.create_collection(collection)
        try:
            self.collections[name] = await asyncio.to_thread(self._open_collection, collection)
        except Exception:
            if self.shared:  # not created after all: the row goes again, so the name stays free (503 kept)
                await asyncio.to_thread(self._withdraw_create, collection)
            raise
        return collection

    def _withdraw_create(self, collection: Collection) -> None:
        from app.cluster.backends import withdraw_failed_create

        try:
            withdraw_failed_create(self.settings, self.catalog, collection)
        except Exception:  # noqa: BLE001 - the create's own error is the answer; this is logged
            log.exception("collection %r: could not withdraw the catalog row of a create that failed", collection.name)

    async def delete_collection(self, name: str) -> None:
        state = self.state(name)
        async with state.write_lock:
            ensure_deletable = getattr(state.index, "ensure_deletable", None)
            if ensure_deletable is not None:  # Ray shards with the head lost: 503 ray_unavailable, nothing deleted
                await asyncio.to_thread(ensure_deletable)  # (it tries the head's port: not on the event loop)
            media = await asyncio.to_thread(self.catalog.delete_collection, name)
            self.collections.pop(name, None)
            for scan in (state.scans.binary, state.scans.float):
                if scan is not None:
                    await scan.stop()
            await asyncio.to_thread(state.index.delete_files)  # Ray shards: up to 5 s for their snapshots to go
            self.posthoc.forget(state.collection)
            self.media.delete(media)
            self.media.delete_collection(name)

    def stats(self, name: str) -> dict[str, Any]:
        state = self.state(name)
        c = state.collection
        items, segments = self.catalog.counts(name)
        return {
            "name": c.name, "modality": c.modality, "encoder": c.encoder, "encoder_version": c.encoder_version, "index_kinds": list(c.index_kinds),
            "dim": c.dim, "bits": c.bits, "window_s": c.window_s, "hop_s": c.hop_s, "keep_media": c.keep_media,
            "description": c.description, "created_at": c.created_at,
            "items": items, "segments": segments, "indexed_segments": len(state.index),
            "memory_bytes": state.index.memory_bytes(),
            "index": _describe_index(state),
            "binary_codes": self.posthoc.describe(c),
        }

    # --- writes ---------------------------------------------------------------------------

    async def commit(self, state: CollectionState, write: Any, new_rows: int = 0) -> WriteResult:
        """Run a catalog write and apply it to the indices, in commit order per collection.

        ``new_rows``: segments the write adds; mapped float files make room for them first, so that
        a full disk is a 507 with nothing stored rather than a committed write the index lacks.
        """
        async with state.write_lock:
            reserve = getattr(state.index, "reserve", None)  # cluster facades have no mapped files
            if new_rows and reserve is not None:
                await asyncio.to_thread(self._reserve, reserve, new_rows)
            result: WriteResult = await asyncio.to_thread(write)
            if self.shared:
                await asyncio.to_thread(state.index.apply_shared, result, self.catalog)
            else:
                await asyncio.to_thread(state.index.apply, result)
            if state.index.unsnapshotted >= self.settings.index.snapshot_every and not self.shared:
                await asyncio.to_thread(self._snapshot, state.index)
        self.media.delete(result.replaced_media)
        return result

    def _reserve(self, reserve: Any, rows: int) -> None:
        with disk_errors(self.index_dir.parent):  # ENOSPC / EROFS: the usual 507 / 503
            reserve(rows)

    def _snapshot(self, index: CollectionIndex) -> None:
        """Write an index snapshot, or log why not: a snapshot is a cache of the catalog, and the
        write it follows is already committed; on a full or read-only disk it is retried later."""
        try:
            index.snapshot(self.catalog)
        except (OSError, InsufficientStorage, StorageReadOnly) as exc:
            log.warning("%s: index snapshot not written (%s); the catalog has every change", index.collection.name, exc)

    async def delete_item(self, collection: str, item_id: str) -> None:
        state = self.state(collection)
        await self.commit(state, lambda: self.catalog.delete_item(collection, item_id))
