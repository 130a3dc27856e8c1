"""A small image collection for search tests: random unit floats and codes, indexed in two shards."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from app.storage.catalog import Catalog, Collection, NewItem
from app.storage.index_store import CollectionIndex


def unit_floats_and_codes(rng: np.random.Generator, n: int, dim: int, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` unit-length float vectors and ``n`` random binary codes, drawn in that order from ``rng``."""
    floats = rng.standard_normal((n, dim)).astype(np.float32)
    floats /= np.linalg.norm(floats, axis=1, keepdims=True)
    return floats, rng.integers(0, 256, (n, bits // 8), dtype=np.uint8)


def image_collection(root: Path, floats: np.ndarray, codes: np.ndarray, ids: list[str],
                     metadata: Callable[[int], dict[str, Any]] = lambda i: {}
                     ) -> tuple[Catalog, Collection, CollectionIndex]:
    """Collection "img" (binary and float) in ``root``, one image per row, and its index in two shards."""
    catalog = Catalog(root / "c.db")
    collection = Collection("img", "image", "test", ("binary", "float"), floats.shape[1], codes.shape[1] * 8,
                            None, None, False, "", 0.0)
    catalog.create_collection(collection)
    catalog.upsert_items("img", [NewItem(ids[i], None, None, None, metadata(i), np.zeros((1, 2)), floats[i:i + 1],
                                         codes[i:i + 1]) for i in range(len(ids))])
    return catalog, collection, CollectionIndex.open(collection, catalog, root, shards=2)
