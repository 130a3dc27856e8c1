"""Catalog rows to service values: a collection, an item's public dict, packed segment arrays.

Shared by both SQL backends (app/storage/sql_catalog.py); rows are mappings (sqlite3.Row or a
psycopg dict row) with the catalog's column names.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from app.index.kinds import IndexSpec
from app.storage.records import Collection


def collection_of_row(row: Any) -> Collection:
    return Collection(
        name=row["name"], modality=row["modality"], encoder=row["encoder"],
        index_kinds=tuple(json.loads(row["index_kinds"])), dim=row["dim"], bits=row["bits"],
        window_s=row["window_s"], hop_s=row["hop_s"], keep_media=bool(row["keep_media"]),
        description=row["description"], created_at=row["created_at"], encoder_version=row["encoder_version"],
        index_spec=IndexSpec.from_json(json.loads(row["index_spec"]) if row["index_spec"] else None),
    )


def item_of_row(row: Any, segments: int | None) -> dict[str, Any]:
    item = {
        "id": row["id"], "filename": row["filename"], "media_type": row["media_type"],
        "has_media": row["media_path"] is not None, "media_path": row["media_path"],
        "duration_s": row["duration_s"], "width": row["width"], "height": row["height"],
        "metadata": json.loads(row["metadata"]), "created_at": row["created_at"],
    }
    if segments is not None:
        item["segments"] = segments
    return item


def unpack_segments(rows: list[Any], dim: int, bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    times = np.asarray([(r[1], r[2]) for r in rows], dtype=np.float64).reshape(-1, 2)
    floats = np.frombuffer(b"".join(bytes(r[3]) for r in rows), dtype=np.float32).reshape(-1, dim)
    codes = np.frombuffer(b"".join(bytes(r[4]) for r in rows), dtype=np.uint8).reshape(-1, bits // 8)
    return ids, times, floats, codes


def chunks(values: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(values), size):
        yield values[i : i + size]
