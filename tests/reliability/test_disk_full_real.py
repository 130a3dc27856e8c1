"""A full or read-only data directory for real (root with mount rights, as in CI here; skipped where the
container cannot mount: the injected faults of test_disk_full.py cover the same paths):
a size-limited tmpfs as the data directory filled up and freed, a tmpfs media directory remounted
read-only and back, and an ext4 image the kernel turns read-only under the catalog.
"""

from __future__ import annotations

import errno
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import error_of, make_settings
from tests.reliability.disk_faults import ingest, listed_ids, media_paths, state, top_hit


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
        # a container without CAP_SYS_ADMIN cannot mount even as root; the injected faults in
        # test_disk_full.py cover the same paths there
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
        # a container without CAP_SYS_ADMIN cannot mount even as root; the injected faults in
        # test_disk_full.py cover the same paths there
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
