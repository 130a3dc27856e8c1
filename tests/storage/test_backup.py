"""`recall backup` while the service keeps writing, `recall restore` into a fresh data directory.

The main test runs a real service (uvicorn on loopback), makes a writer replace and delete items
while the backup copies originals (slowed down, so the writes do land in the middle of it),
restores, starts a second service on the copy and compares: the collection nobody wrote to
during the backup answers every query exactly as the original did, and the busy one is one of
the states the writer's acknowledged writes passed through, with each original matching its
embedding.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.cli import main
from app.index._snapshot import write_snapshot
from app.main import create_app
from app.storage import backup as backup_module
from app.storage.backup import BackupError, backup, restore
from app.storage.media_store import BACKUPS, TRASH, MediaStore
from tests.conftest import make_settings, tone_wav
from tests.live_server import live_server


def _wav(tone: int) -> bytes:
    return tone_wav(250 + 23 * tone, seconds=0.6)


def _ingest(http, name: str, items: dict[str, int]) -> httpx.Response:
    files = [("files", (f"{i}.wav", _wav(t))) for i, t in items.items()]
    return http.post(f"/v1/collections/{name}/items", files=files, data={"ids": ",".join(items)})


def _search(http, name: str, tone: int, mode: str) -> list[tuple[str, float]]:
    response = http.post(f"/v1/collections/{name}/search", files={"file": ("q.wav", _wav(tone))},
                         data={"k": "5", "mode": mode})
    assert response.status_code == 200, response.text
    return [(r["id"], r["score"]) for r in response.json()["results"]]


QUERIES = [(tone, mode) for tone in (0, 2, 5, 7, 40) for mode in ("binary", "float", "two_stage")]


class Writer(threading.Thread):
    """Alternates an upsert (a new item w<n>, and item u replaced by version n: one commit) and a delete
    of the previous w; keeps the model of the collection after each acknowledged write."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=url, timeout=60)
        self.states: list[tuple[frozenset[str], int]] = []  # after each acknowledged write: ids, u's version
        self.started_ops = 0
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        ids, version, n = {"u"}, 0, 0
        try:
            while not self.stop.is_set():
                n += 1
                self.started_ops += 1
                assert _ingest(self.http, "busy", {f"w{n}": 100 + n, "u": 200 + n}).status_code == 200
                ids, version = ids | {f"w{n}"}, n
                self.states.append((frozenset(ids), version))
                if n > 1:
                    self.started_ops += 1
                    assert self.http.delete(f"/v1/collections/busy/items/w{n - 1}").status_code == 204
                    ids = ids - {f"w{n - 1}"}
                    self.states.append((frozenset(ids), version))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def test_backup_during_writes_restores_to_identical_search(tmp_path, monkeypatch):
    monkeypatch.delenv("RECALL_CATALOG_URL", raising=False)
    settings = make_settings(tmp_path, data_dir=tmp_path / "a", index={"snapshot_every": 3})
    dest, restored = tmp_path / "backup", tmp_path / "b"
    slow_copy = backup_module._copy

    def slow(source, target):  # a slow disk: the writer's replacements and deletes land mid-copy
        time.sleep(0.15)
        return slow_copy(source, target)

    with live_server(settings) as url, httpx.Client(base_url=url, timeout=60) as http:
        for name in ("fixed", "busy"):
            assert http.post("/v1/collections", json={"name": name, "modality": "audio"}).status_code == 201
        assert _ingest(http, "fixed", {f"f{i}": i for i in range(8)}).status_code == 200
        assert _ingest(http, "busy", {"u": 200}).status_code == 200
        expected = {q: _search(http, "fixed", *q) for q in QUERIES}

        writer = Writer(url)
        writer.start()
        while len(writer.states) < 4 and writer.error is None:
            time.sleep(0.02)
        monkeypatch.setattr(backup_module, "_copy", slow)
        acked_before = len(writer.states)
        assert main(["backup", str(dest), "--data-dir", str(settings.data_dir)]) == 0
        started_after = writer.started_ops
        monkeypatch.setattr(backup_module, "_copy", slow_copy)
        while len(writer.states) < started_after + 4 and writer.error is None:
            time.sleep(0.02)
        writer.stop.set()
        writer.join(60)
        assert writer.error is None, writer.error
        assert started_after > acked_before, "no write overlapped the backup"
        assert not any((settings.data_dir / "media" / BACKUPS).iterdir())  # the marker is gone
        assert not (settings.data_dir / "media" / TRASH).exists()  # emptied by the first delete after it

    assert main(["restore", str(dest), str(restored)]) == 0
    with TestClient(create_app(make_settings(tmp_path, data_dir=restored))) as http:
        for query, hits in expected.items():
            got = _search(http, "fixed", *query)
            assert [i for i, _ in got] == [i for i, _ in hits], query
            np.testing.assert_allclose([s for _, s in got], [s for _, s in hits], rtol=1e-6, atol=1e-6)

        ids = frozenset(i["id"] for i in http.get("/v1/collections/busy/items", params={"limit": 1000}).json()["data"])
        version = next(v for v in range(0, 1000) if http.get("/v1/collections/busy/items/u/media").content == _wav(200 + v))
        assert (ids, version) in writer.states[acked_before - 1 : started_after], (ids, version)
        assert _search(http, "busy", 200 + version, "float")[0][0] == "u"  # its original matches its embedding
        stats = http.get("/v1/collections/busy").json()
        assert stats["indexed_segments"] == stats["segments"]


def _service_with_items(tmp_path):
    settings = make_settings(tmp_path, data_dir=tmp_path / "a")
    with TestClient(create_app(settings)) as http:
        assert http.post("/v1/collections", json={"name": "c", "modality": "audio"}).status_code == 201
        assert _ingest(http, "c", {"x": 1, "y": 2}).status_code == 200
    return settings.data_dir


def test_restore_checks_the_backup_and_refuses_a_used_directory(tmp_path):
    data_dir = _service_with_items(tmp_path)
    summary = backup(data_dir, tmp_path / "bk")
    assert summary["collections"]["c"]["items"] == 2 and summary["media_files"] == 2
    with pytest.raises(BackupError, match="not an empty folder"):
        backup(data_dir, tmp_path / "bk")
    with pytest.raises(BackupError, match="not empty"):
        restore(tmp_path / "bk", data_dir)
    media = next((tmp_path / "bk" / "media" / "c").iterdir())
    media.write_bytes(media.read_bytes()[:-1] + b"!")
    with pytest.raises(BackupError, match="damaged"):
        restore(tmp_path / "bk", tmp_path / "new")
    assert not (tmp_path / "new").exists()  # nothing half-restored
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_backup_and_restore_into_existing_empty_folders(tmp_path):
    """An empty volume's mount point cannot be renamed over: the result is built inside it and moved up."""
    data_dir = _service_with_items(tmp_path)
    (tmp_path / "bk").mkdir()
    (tmp_path / "new").mkdir()
    backup(data_dir, tmp_path / "bk")
    restore(tmp_path / "bk", tmp_path / "new")
    assert sorted(p.name for p in (tmp_path / "bk").iterdir()) == ["catalog.sqlite3", "indices", "manifest.json", "media"]
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["catalog.sqlite3", "indices", "media"]
    with TestClient(create_app(make_settings(tmp_path, data_dir=tmp_path / "new"))) as http:
        assert http.get("/v1/collections/c").json()["items"] == 2
        assert http.get("/v1/collections/c/items/x/media").content == _wav(1)


def test_an_index_snapshot_newer_than_the_catalog_copy_is_left_for_a_rebuild(tmp_path):
    ids, rows = [np.arange(3, dtype=np.int64)], [np.zeros((3, 4), np.uint8)]
    write_snapshot(tmp_path / "s.faiss", kind=1, width=32, last_seq=7, ids=ids, rows=rows)
    assert backup_module._copy_snapshot(tmp_path / "s.faiss", tmp_path / "out" / "s", upto_seq=6) is None
    copied = backup_module._copy_snapshot(tmp_path / "s.faiss", tmp_path / "out" / "s", upto_seq=7)
    assert copied is not None and (tmp_path / "out" / "s").read_bytes() == (tmp_path / "s.faiss").read_bytes()


def test_deleted_originals_wait_in_the_trash_while_a_backup_runs(tmp_path):
    store = MediaStore(tmp_path / "media")
    first, second = store.write("c", b"one", ".wav"), store.write("c", b"two", ".wav")
    marker = store.root / BACKUPS / "running"
    marker.parent.mkdir(parents=True)
    marker.touch()
    store.delete([first])
    assert not store.path(first).exists()
    assert store.locate(first).read_bytes() == b"one"  # the backup still finds it
    marker.unlink()
    store.delete([second])
    assert store.locate(first) is None and store.locate(second) is None
    assert not (store.root / TRASH).exists()


def test_a_marker_left_by_a_killed_backup_is_cleared_by_the_next(tmp_path):
    data_dir = _service_with_items(tmp_path)
    markers = data_dir / "media" / BACKUPS
    markers.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (markers / f"{socket.gethostname()}--{dead.pid}--x").touch()  # its process is gone
    (markers / f"{socket.gethostname()}--{os.getpid()}--y").touch()  # alive: this test
    (markers / "elsewhere--1--z").touch()  # another host's: not ours to judge
    backup(data_dir, tmp_path / "bk")
    assert {p.name for p in markers.iterdir()} == {f"{socket.gethostname()}--{os.getpid()}--y", "elsewhere--1--z"}


def test_cluster_mode_is_refused_with_pg_dump_named(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RECALL_CATALOG_URL", "postgresql://u@localhost/recall")
    assert main(["backup", str(tmp_path / "bk"), "--data-dir", str(tmp_path)]) == 2
    assert "pg_dump" in capsys.readouterr().err
    assert not (tmp_path / "bk").exists()


def test_the_summary_is_json(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RECALL_CATALOG_URL", raising=False)
    data_dir = _service_with_items(tmp_path)
    (data_dir / "keys.json").write_text('{"keys": []}')
    assert main(["backup", str(tmp_path / "bk"), "--data-dir", str(data_dir)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["collections"]["c"]["segments"] > 0
    manifest = json.loads((tmp_path / "bk" / "manifest.json").read_text())
    assert set(manifest["files"]) >= {"catalog.sqlite3", "keys.json"} and all(len(f["sha256"]) == 64 for f in manifest["files"].values())
    assert main(["restore", str(tmp_path / "bk"), str(tmp_path / "new")]) == 0
    assert (tmp_path / "new" / "keys.json").read_text() == '{"keys": []}'  # keys stay on after a restore
