"""Per-collection binary codes for encoders that have no trained hash head (ONNX folders).

Such an encoder's own codes are placeholders; a collection of it gets its codes from a PCA + ITQ
fit (:mod:`app.encoders.onnx_folder.itq`) on its first ingest request's vectors (up to
``encoders.posthoc_fit_vectors``), stored under ``<data_dir>/posthoc/`` and applied to every later
ingest and to every query, so the Hamming and two-stage searches compare codes of one hasher. The
fit is frozen: codes already in the catalog never change; ``recall reembed`` builds a new
collection, hence a new fit. The file is named after the collection and its creation time, so a
collection deleted and created again under the same name never reads its predecessor's fit.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, Awaitable, Callable

import numpy as np

from app.encoders.onnx_folder.itq import ItqCodes, fit_itq
from app.errors import Conflict
from app.storage.records import Collection

log = logging.getLogger(__name__)


def uses_posthoc_codes(encoder: Any) -> bool:
    return bool(getattr(encoder, "posthoc_codes", False))


class PostHocCodes:
    def __init__(self, directory: Path, fit_vectors: int) -> None:
        self.directory = directory
        self.fit_vectors = fit_vectors
        self._fitted: dict[str, ItqCodes] = {}
        self._lock = asyncio.Lock()

    def path(self, collection: Collection) -> Path:
        # "@" never occurs in a collection name, so one collection's files never match another's name
        return self.directory / f"{collection.name}@{int(collection.created_at * 1_000_000)}.npz"

    def get(self, collection: Collection) -> ItqCodes | None:
        """The collection's fit, from memory or its file (written by this or another API process)."""
        path = self.path(collection)
        found = self._fitted.get(str(path))
        if found is None and path.is_file():
            found = self._fitted[str(path)] = ItqCodes.load(path)
        return found

    async def ingest_codes(self, collection: Collection, encoder: Any, items: list[Any], stored: int) -> None:
        """Replace the placeholder codes of ``items`` (NewItem rows) with the collection's fitted ones,
        fitting them first on these items' vectors when the collection has no fit yet.

        ``stored``: windows the collection already indexes. With some stored and no fit found (its file
        lost, e.g. a data directory copied without ``posthoc/``), a new fit would give codes that do
        not compare with the stored ones, so the ingest is refused with the way out instead.
        """
        if not uses_posthoc_codes(encoder) or not items:
            return
        hasher = self.get(collection)
        if hasher is None:
            async with self._lock:  # two first ingests at once fit once
                hasher = self.get(collection)
                if hasher is None and stored:
                    raise Conflict(self._lost(collection))
                if hasher is None:
                    floats = np.concatenate([item.floats for item in items])[: self.fit_vectors]
                    hasher = await asyncio.to_thread(self._fit_and_store, collection, floats)
        for item in items:
            item.codes = hasher.codes(item.floats)

    async def fit_ahead(self, collection: Collection, encoder: Any, stored: int, chunks: list[Any],
                        prepare_chunk: Callable[[Any], Awaitable[list[Any]]]) -> dict[int, list[Any]]:
        """Fit an empty collection's codes on its first ingest's first ``fit_vectors`` vectors.

        The ingest commits in chunks of files; so that the fit sees the whole first request (up to
        ``fit_vectors``) and not only its first chunk, the chunks it needs are prepared (decoded and
        embedded) here first. Returns them by chunk index for the ingest to commit, in order.
        """
        if not uses_posthoc_codes(encoder) or stored or self.get(collection) is not None:
            return {}
        async with self._lock:  # two first ingests at once fit once
            if self.get(collection) is not None:
                return {}
            ahead: dict[int, list[Any]] = {}
            vectors: list[np.ndarray] = []
            for index, chunk in enumerate(chunks):
                ahead[index] = await prepare_chunk(chunk)
                vectors += [r.floats for r in ahead[index] if not isinstance(r, BaseException)]
                if sum(len(v) for v in vectors) >= self.fit_vectors:
                    break
            if vectors:
                await asyncio.to_thread(self._fit_and_store, collection, np.concatenate(vectors)[: self.fit_vectors])
            return ahead

    def _fit_and_store(self, collection: Collection, floats: np.ndarray) -> ItqCodes:
        hasher = fit_itq(floats, collection.bits)
        path = self.path(collection)
        try:
            hasher.save(path)
        except FileExistsError:  # another API process sharing the data directory fitted first: its fit it is
            hasher = ItqCodes.load(path)
        else:
            log.info("%s: binary codes fitted (PCA + ITQ) on %d vectors", collection.name, len(floats))
            if len(floats) < 2 * collection.bits:  # too few to place the directions (bench/results/onnx_codes.json)
                log.warning("%s: its %d-bit codes were fitted on only %d vectors; binary search will be weak (two-stage "
                            "and float are not affected); `recall reembed` refits on a larger first request",
                            collection.name, collection.bits, len(floats))
        self._fitted[str(path)] = hasher
        return hasher

    def query_codes(self, collection: Collection, encoder: Any, floats: np.ndarray, codes: np.ndarray, *, stored: int,
                    needs_codes: bool) -> np.ndarray:
        """A query's codes under the collection's fit (its own codes for other encoders, or before any
        ingest: an empty collection has nothing to match). ``needs_codes``: a binary or two-stage search;
        one of those over stored codes whose fit is lost is refused (a float search still answers)."""
        if not uses_posthoc_codes(encoder):
            return codes
        hasher = self.get(collection)
        if hasher is None and stored and needs_codes:
            raise Conflict(self._lost(collection) + "; float searches (mode=float) still work")
        return codes if hasher is None else hasher.codes(floats)

    def _lost(self, collection: Collection) -> str:
        return (f"collection {collection.name!r}: its binary-code fit {self.path(collection)} is missing, and a new one "
                "would not match the stored codes; restore that file, or re-embed the collection into a new one with "
                "`recall reembed SOURCE TARGET`")

    def describe(self, collection: Collection) -> dict[str, Any] | None:
        """What GET /v1/collections/{name} says of the fit; None where there is none."""
        hasher = self.get(collection)
        return None if hasher is None else {"method": "pca-itq", "bits": hasher.bits, "fitted_on": hasher.fitted_on}

    def forget(self, collection: Collection) -> None:
        path = self.path(collection)
        self._fitted.pop(str(path), None)
        path.unlink(missing_ok=True)
