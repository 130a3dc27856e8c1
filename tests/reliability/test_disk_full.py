"""A full or read-only data directory: ingest answers 507 / 503 with the reason, leaves nothing
half-written (catalog rows, index entries, media files, snapshot temporaries), search goes on,
and ingest works again once space is back, without a restart.

Two ways: injected failures at the real write paths (run everywhere), and a real size-limited
tmpfs mounted as the data directory (needs root to mount; CI runs as root, so there it must run).
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.index import _snapshot
from app.main import create_app
from app.storage import media_store
from tests.conftest import error_of, make_settings, tone_wav
from tests.reliability.disk_faults import FailingOs, FullDb


def _wav(i: int) -> bytes:
    return tone_wav(300 + 37 * i, seconds=0.6)


def ingest(client, name: str, ids: list[str], start: int = 0):
    files = [("files", (f"{i}.wav", _wav(start + n))) for n, i in enumerate(ids)]
    return client.post(f"/v1/collections/{name}/items", files=files, data={"ids": ",".join(ids)})


def top_hit(client, name: str, tone: int) -> str:
    """The best match for a query with the tone ``_wav(tone)``: the item ingested with it."""
    response = client.post(f"/v1/collections/{name}/search", files={"file": ("q.wav", _wav(tone))}, data={"k": "3"})
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


# --- injected failures: run everywhere ------------------------------------------------------

@pytest.fixture
def service(tmp_path):
    settings = make_settings(tmp_path, index={"snapshot_every": 1})
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert ingest(client, "au", ["a0", "a1", "a2"]).status_code == 200
        yield client, settings.data_dir


@pytest.mark.parametrize("err, status, code, reason", [
    (errno.ENOSPC, 507, "insufficient_storage", "disk_full"),
    (errno.EDQUOT, 507, "insufficient_storage", "disk_full"),
    (errno.EROFS, 503, "storage_read_only", "read_only"),
])
def test_a_media_write_that_fails_stores_nothing_and_says_why(service, monkeypatch, err, status, code, reason):
    client, data_dir = service
    before = state(client, data_dir, "au")
    monkeypatch.setattr(media_store, "os", FailingOs(err))
    response = ingest(client, "au", ["b0", "b1", "a1"], start=10)  # two new, one replacement
    assert response.status_code == status, response.text
    body = error_of(response)
    assert body["code"] == code and body["details"] == {"reason": reason}
    assert state(client, data_dir, "au") == before  # no row, no index entry, no partial file
    assert top_hit(client, "au", 0) == "a0"
    monkeypatch.undo()
    assert ingest(client, "au", ["b0"], start=10).status_code == 200  # no restart needed
    assert top_hit(client, "au", 10) == "b0"


def test_a_commit_refused_by_a_full_catalog_removes_the_stored_originals(service, monkeypatch):
    client, data_dir = service
    catalog = client.app_state["services"].catalog
    before = state(client, data_dir, "au")
    monkeypatch.setattr(catalog, "_db", FullDb(catalog._db))
    response = ingest(client, "au", ["c0", "c1"], start=20)
    assert response.status_code == 507, response.text
    assert error_of(response)["code"] == "insufficient_storage"
    monkeypatch.undo()
    assert state(client, data_dir, "au") == before  # the originals written before the commit are gone again
    assert ingest(client, "au", ["c0", "c1"], start=20).status_code == 200
    assert top_hit(client, "au", 21) == "c1"


def test_a_read_only_catalog_answers_503_and_a_delete_changes_nothing(service, monkeypatch):
    client, data_dir = service
    catalog = client.app_state["services"].catalog
    before = state(client, data_dir, "au")
    monkeypatch.setattr(catalog, "_db", FullDb(catalog._db, "attempt to write a readonly database"))
    response = client.delete("/v1/collections/au/items/a1")
    assert response.status_code == 503 and error_of(response)["code"] == "storage_read_only"
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", _wav(30)))])
    assert job.status_code == 503, job.text  # the job is refused before its 202: nothing was accepted
    monkeypatch.undo()
    assert state(client, data_dir, "au") == before
    assert client.delete("/v1/collections/au/items/a1").status_code == 204


def test_a_snapshot_that_cannot_be_written_does_not_fail_a_committed_ingest(service, monkeypatch):
    client, data_dir = service
    real_open = open

    class HalfWritten:
        """A snapshot file the disk fills up under: the first bytes land, then ENOSPC."""

        def __init__(self, handle) -> None:
            self.handle = handle

        def write(self, data) -> int:
            self.handle.write(bytes(data)[:16])
            self.handle.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.handle.close()

        def __getattr__(self, name: str):
            return getattr(self.handle, name)

    def full_open(path, mode="r", *args, **kwargs):
        handle = real_open(path, mode, *args, **kwargs)
        return HalfWritten(handle) if "w" in mode else handle

    monkeypatch.setattr(_snapshot, "open", full_open, raising=False)  # snapshot_every=1: every commit tries
    response = ingest(client, "au", ["d0"], start=40)
    assert response.status_code == 200, response.text  # committed, hence acknowledged
    assert top_hit(client, "au", 40) == "d0"
    assert state(client, data_dir, "au")["temporaries"] == []


# --- a real small filesystem ----------------------------------------------------------------

def _mount(directory: Path, size: str) -> str | None:
    """Mount a tmpfs of ``size`` at ``directory``; the reason when that is impossible here."""
    if os.geteuid() != 0:
        return "mounting a size-limited filesystem needs root (CI runs as root)"
    directory.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory)],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"


def _remount(directory: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(directory)], check=True, capture_output=True)


@pytest.fixture
def small_disk(tmp_path):
    directory = tmp_path / "disk"
    reason = _mount(directory, "3m")
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real full-disk test: {reason}")
        pytest.skip(reason)
    try:
        yield directory
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(directory)], capture_output=True)
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


def _fill(directory: Path) -> Path:
    """Take every free block of the filesystem with one file."""
    filler = directory / f"filler-{uuid.uuid4().hex}"
    block = b"\0" * 65536
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(block)
                handle.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    # buffered bytes that did not fit are dropped with the error; what is left is what fits
    while True:
        try:
            with open(filler, "ab") as handle:
                handle.write(b"\0" * 512)
        except OSError:
            break
    return filler


def test_a_real_full_disk_then_freed(small_disk, tmp_path):
    data_dir = small_disk / "data"
    settings = make_settings(tmp_path, data_dir=data_dir)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert client.post("/v1/collections", json={"name": "nm", "modality": "audio", "keep_media": False}).status_code == 201
        assert ingest(client, "au", ["a0", "a1", "a2"]).status_code == 200
        assert ingest(client, "nm", ["n0", "n1"]).status_code == 200
        filler = _fill(small_disk)

        # with originals kept, the media write meets the full disk first
        before = state(client, data_dir, "au")
        response = ingest(client, "au", ["b0", "b1"], start=10)
        assert response.status_code == 507, response.text
        assert error_of(response)["details"] == {"reason": "disk_full"}
        assert state(client, data_dir, "au") == before
        assert top_hit(client, "au", 2) == "a2"

        # without originals, SQLite meets it (once its WAL's free pages run out): every 200 is kept
        acknowledged = {"n0", "n1"}
        refused = None
        for n in range(200):
            response = ingest(client, "nm", [f"m{n}"], start=100 + n)
            if response.status_code != 200:
                refused = response
                break
            acknowledged.add(f"m{n}")
        assert refused is not None and refused.status_code == 507, refused and refused.text
        assert error_of(refused)["code"] == "insufficient_storage"
        assert listed_ids(client, "nm") == acknowledged
        services = client.app_state["services"]
        assert len(services.collections["nm"].index) == services.catalog.counts("nm")[1]

        filler.unlink()  # space is back: no restart
        assert ingest(client, "au", ["b0", "b1"], start=10).status_code == 200
        assert ingest(client, "nm", ["late"], start=400).status_code == 200
        assert top_hit(client, "au", 11) == "b1"
        assert media_paths(client, "au") == {f"au/{p}" for p in state(client, data_dir, "au")["media"]}

    with TestClient(create_app(settings)) as client:  # and all of it survives a restart
        assert listed_ids(client, "au") == {"a0", "a1", "a2", "b0", "b1"}
        assert listed_ids(client, "nm") == acknowledged | {"late"}


def test_a_real_read_only_remount_then_read_write(tmp_path):
    """The media directory on its own tmpfs, remounted read-only under a running service and back.

    Linux refuses to remount read-only a filesystem with files open for writing (EBUSY), and the
    catalog's SQLite files always are; so the filesystem turned read-only here is the one of the
    originals, which the service opens only while writing one. (SQLite's own read-only answer is
    covered by the injected test above.)
    """
    data_dir = tmp_path / "data"
    media = data_dir / "media"
    reason = _mount(media, "2m")
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the real read-only test: {reason}")
        pytest.skip(reason)
    settings = make_settings(tmp_path, data_dir=data_dir)
    try:
        with TestClient(create_app(settings)) as client:
            assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
            assert ingest(client, "au", ["a0", "a1"]).status_code == 200
            before = state(client, data_dir, "au")
            _remount(media, "ro")
            try:
                response = ingest(client, "au", ["b0", "a0"], start=10)
                assert response.status_code == 503, response.text
                assert error_of(response)["details"] == {"reason": "read_only"}
                assert top_hit(client, "au", 1) == "a1"
                assert state(client, data_dir, "au") == before
            finally:
                _remount(media, "rw")
            assert ingest(client, "au", ["b0"], start=10).status_code == 200
            assert top_hit(client, "au", 10) == "b0"
        with TestClient(create_app(settings)) as client:
            assert listed_ids(client, "au") == {"a0", "a1", "b0"}
            services = client.app_state["services"]
            assert len(services.collections["au"].index) == services.catalog.counts("au")[1]
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(media)], capture_output=True)
        subprocess.run(["umount", "-l", str(media)], capture_output=True)


def test_a_background_job_that_meets_a_full_disk_fails_with_the_reason_and_the_next_one_runs(service, monkeypatch):
    client, data_dir = service
    before = state(client, data_dir, "au")
    monkeypatch.setattr(media_store, "os", FailingOs(errno.ENOSPC))
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", _wav(50)))], data={"ids": "j0"})
    assert job.status_code == 202, job.text
    failed = _wait_for_job(client, job.json()["id"])
    assert failed["status"] == "failed" and "no space left" in failed["error"]
    assert state(client, data_dir, "au") == before
    monkeypatch.undo()
    job = client.post("/v1/collections/au/items?wait=false", files=[("files", ("j.wav", _wav(50)))], data={"ids": "j0"})
    assert _wait_for_job(client, job.json()["id"])["status"] == "completed"
    assert top_hit(client, "au", 50) == "j0"


def _wait_for_job(client, job_id: str) -> dict:
    for _ in range(600):
        body = client.get(f"/v1/jobs/{job_id}").json()
        if body["status"] in ("completed", "failed"):
            return body
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {body}")


@pytest.fixture
def failing_ext4(tmp_path):
    """A small ext4 image, loop-mounted with errors=remount-ro: the kernel's own 'the disk turned read-only'."""
    if os.geteuid() != 0:
        pytest.skip("loop-mounting an ext4 image needs root")
    image, directory = tmp_path / "disk.ext4", tmp_path / "ext4"
    directory.mkdir()
    subprocess.run(["truncate", "-s", "16M", str(image)], check=True)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], capture_output=True, text=True)
    mounted = made.returncode == 0 and subprocess.run(
        ["mount", "-o", "loop,errors=remount-ro", str(image), str(directory)], capture_output=True).returncode == 0
    if not mounted:
        pytest.skip("no loop device or mkfs.ext4 here (the tmpfs tests above cover a full disk)")
    device = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(directory)], capture_output=True, text=True).stdout.strip()
    trigger = Path("/sys/fs/ext4") / Path(device).name / "trigger_fs_error"
    try:
        if not trigger.exists():
            pytest.skip(f"{trigger}: this kernel cannot simulate an ext4 error")
        yield directory, trigger
    finally:
        subprocess.run(["umount", "-l", str(directory)], capture_output=True)


def test_a_disk_the_kernel_turns_read_only_under_the_catalog(failing_ext4, tmp_path):
    """An ext4 error with errors=remount-ro: SQLite's next write fails, ingest answers 503 storage_read_only,
    searches go on, and everything acknowledged before is there when the image is mounted again.
    (An ext4 emergency read-only cannot be remounted read-write without unmounting: that needs a restart.)"""
    directory, trigger = failing_ext4
    data_dir = directory / "data"
    settings = make_settings(tmp_path, data_dir=data_dir)
    with TestClient(create_app(settings)) as client:
        assert client.post("/v1/collections", json={"name": "nm", "modality": "audio", "keep_media": False}).status_code == 201
        assert ingest(client, "nm", ["a0", "a1"]).status_code == 200
        before = state(client, data_dir, "nm")
        trigger.write_text("1")
        response = ingest(client, "nm", ["b0"], start=10)
        assert response.status_code == 503, response.text
        assert error_of(response)["details"] == {"reason": "read_only"}
        assert top_hit(client, "nm", 1) == "a1"
        assert state(client, data_dir, "nm") == before


def test_a_postgres_catalog_that_is_full_or_read_only(tmp_path, pg_url):
    """Cluster mode's catalog: PostgreSQL's own disk_full (raised by the server, from a trigger) answers 507 and
    a read-only server (default_transaction_read_only) 503; nothing is kept, search goes on, and both clear
    without a restart."""
    import psycopg

    settings = make_settings(tmp_path, catalog_url=pg_url)
    with TestClient(create_app(settings)) as client, psycopg.connect(pg_url, autocommit=True) as admin:
        assert client.post("/v1/collections", json={"name": "au", "modality": "audio"}).status_code == 201
        assert ingest(client, "au", ["a0", "a1"]).status_code == 200
        before = state(client, settings.data_dir, "au")
        admin.execute("CREATE FUNCTION full_disk() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                      "RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full'; END $$")
        admin.execute("CREATE TRIGGER full_disk BEFORE INSERT ON segments EXECUTE FUNCTION full_disk()")
        response = ingest(client, "au", ["b0", "a0"], start=10)
        assert response.status_code == 507, response.text
        assert error_of(response)["details"] == {"reason": "disk_full"}
        assert state(client, settings.data_dir, "au") == before  # the originals stored for it are gone again
        assert top_hit(client, "au", 1) == "a1"
        admin.execute("DROP TRIGGER full_disk ON segments")

        catalog = client.app_state["services"].catalog
        catalog._db.execute("SET default_transaction_read_only = on")
        response = ingest(client, "au", ["b0"], start=10)
        assert response.status_code == 503 and error_of(response)["details"] == {"reason": "read_only"}
        assert state(client, settings.data_dir, "au") == before
        catalog._db.execute("SET default_transaction_read_only = off")
        assert ingest(client, "au", ["b0"], start=10).status_code == 200
        assert top_hit(client, "au", 10) == "b0"
