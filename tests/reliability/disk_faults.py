"""Shared by the full-disk tests: injected failures at the real write paths (the originals' fsync, the
catalog's SQLite writes) and what a refused write must leave exactly as it was."""

from __future__ import annotations

import os
import sqlite3
import types
from pathlib import Path

from tests.conftest import tone_wav


class FailingOs(types.SimpleNamespace):
    """The os module as media_store sees it, with fsync failing as a full disk makes it fail."""

    def __init__(self, err: int) -> None:
        super().__init__(**vars(os))

        def fsync(fd: int) -> None:
            raise OSError(err, os.strerror(err))

        self.fsync = fsync


class FullDb:
    """The catalog's SQLite connection, refusing every write the way SQLITE_FULL does."""

    def __init__(self, db: sqlite3.Connection, message: str = "database or disk is full") -> None:
        self._real = db
        self._message = message

    def execute(self, sql: str, *args):
        if sql.lstrip().upper().startswith(("BEGIN", "INSERT", "UPDATE", "DELETE")):
            raise sqlite3.OperationalError(self._message)
        return self._real.execute(sql, *args)

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def wav(i: int) -> bytes:
    return tone_wav(300 + 37 * i, seconds=0.6)


def ingest(client, name: str, ids: list[str], start: int = 0):
    files = [("files", (f"{i}.wav", wav(start + n))) for n, i in enumerate(ids)]
    return client.post(f"/v1/collections/{name}/items", files=files, data={"ids": ",".join(ids)})


def top_hit(client, name: str, tone: int) -> str:
    """The best match for a query with the tone ``wav(tone)``: the item ingested with it."""
    response = client.post(f"/v1/collections/{name}/search", files={"file": ("q.wav", wav(tone))}, data={"k": "3"})
    assert response.status_code == 200, response.text
    return response.json()["results"][0]["id"]


def listed_ids(client, name: str) -> set[str]:
    return {i["id"] for i in client.get(f"/v1/collections/{name}/items", params={"limit": 1000}).json()["data"]}


def state(client, data_dir: Path, name: str) -> dict:
    """Everything a failed ingest must leave as it was: rows, index entries, media files, temporaries."""
    services = client.app_state["services"]
    media = data_dir / "media" / name
    return {
        "items": listed_ids(client, name),
        "counts": services.catalog.counts(name),
        "indexed": len(services.collections[name].index),
        "index_ids": sorted(services.collections[name].index.binary.ids().tolist()),
        "media": sorted(p.name for p in media.iterdir()) if media.is_dir() else [],
        "temporaries": sorted(p.name for p in (data_dir / "indices").glob(".*.tmp")),
    }


def media_paths(client, name: str) -> set[str]:
    services = client.app_state["services"]
    items = services.catalog.list_items(name, 1000, 0)
    return {i["media_path"] for i in items if i["media_path"]}
