"""Missing system packages: scripts/system_deps.sh (install or refuse) and the pytest skip + CI rule.

The script is run for real with stand-ins on PATH for the parts that would touch the machine:
``dpkg-query`` (what is installed), ``id`` (root or not) and ``apt-get`` (records its arguments).
The pytest side runs a small suite in a subprocess whose PATH has no ffmpeg.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.system_deps import MISSING, missing_reason

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "system_deps.sh"
TEST_PACKAGES = "python3-venv ffmpeg libsndfile1 espeak-ng sox chromium chromium-driver fonts-dejavu-core postgresql make gcc"


def _fake_bin(tmp_path: Path, *, uid: int, installed: str) -> Path:
    """A directory of stand-ins: dpkg-query reporting ``installed``, id printing ``uid``, apt-get logging."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scripts = {
        # like the real one: a line per package it knows, and exit 1 if any asked for was never known
        "dpkg-query": (f'known=" {installed} "; rc=0; shift 2; for p in "$@"; do '
                       'case "$known" in *" $p "*) echo "installed $p" ;; *) rc=1 ;; esac; done; exit $rc'),
        "id": f"echo {uid}",
        "apt-get": f'echo "$@" >> {tmp_path / "apt.log"}',
        "sudo": "exit 99",  # must never be called
    }
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(0o755)
    return bin_dir


def _run_script(tmp_path: Path, target: str, *, uid: int, installed: str, **env: str) -> subprocess.CompletedProcess:
    bin_dir = _fake_bin(tmp_path, uid=uid, installed=installed)
    environment = {
        "PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": sys.executable, "HOME": str(tmp_path), **env,
    }
    return subprocess.run(["bash", str(SCRIPT), target], env=environment, capture_output=True, text=True, timeout=60)


def test_everything_installed_passes_silently(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "test", uid=1000, installed=TEST_PACKAGES)
    assert result.returncode == 0, result.stderr
    assert "apt-get" not in result.stderr and not (tmp_path / "apt.log").exists()


def test_non_root_is_refused_with_the_exact_command(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "test", uid=1000, installed="python3-venv libsndfile1 fonts-dejavu-core")
    assert result.returncode == 1
    missing = "ffmpeg espeak-ng sox chromium chromium-driver postgresql"
    command = f"sudo apt-get update && sudo apt-get install -y --no-install-recommends {missing}"
    assert command in result.stderr, result.stderr
    assert "make test needs Debian packages that are not installed" in result.stderr
    assert not (tmp_path / "apt.log").exists()  # nothing was attempted


def test_serve_asks_only_for_what_the_service_needs(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "serve", uid=1000, installed="python3-venv libsndfile1")
    assert result.returncode == 1
    assert "apt-get install -y --no-install-recommends ffmpeg espeak-ng\n" in result.stderr
    assert "chromium" not in result.stderr and "postgresql" not in result.stderr


def test_root_with_apt_installs_only_the_missing_packages(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "test", uid=0, installed=TEST_PACKAGES.replace(" sox", "").replace(" chromium ", " "))
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "apt.log").read_text().splitlines()
    assert calls == ["update -q", "install -y -q --no-install-recommends sox chromium"]


def test_check_only_refuses_even_as_root_and_without_sudo(tmp_path: Path) -> None:
    result = _run_script(tmp_path, "serve", uid=0, installed="python3-venv ffmpeg libsndfile1", SYSTEM_DEPS_CHECK_ONLY="1")
    assert result.returncode == 1
    assert "    apt-get update && apt-get install -y --no-install-recommends espeak-ng" in result.stderr
    assert not (tmp_path / "apt.log").exists()


def test_a_python_older_than_3_11_is_named(tmp_path: Path) -> None:
    old = tmp_path / "python-old"
    old.write_text("#!/bin/sh\necho '3.9 0 venv'\n")
    old.chmod(0o755)
    result = _run_script(tmp_path, "serve", uid=0, installed="", PYTHON=str(old))
    assert result.returncode == 1
    assert "needs Python 3.11 or newer" in result.stderr and "make serve PYTHON=" in result.stderr
    assert not (tmp_path / "apt.log").exists()


# --- pytest side --------------------------------------------------------------------------------

SUITE = '''
import pytest
from tests.system_deps import require_system

@pytest.mark.system("ffmpeg")
def test_needs_ffmpeg():
    pass

@pytest.fixture
def encoder():
    require_system("ffmpeg")

def test_fixture_needs_ffmpeg(encoder):
    pass

def test_plain():
    pass

def test_skipped_for_another_reason():
    pytest.skip("not on this platform")
'''


def _run_suite(tmp_path: Path, path_env: str, ci: str | None) -> subprocess.CompletedProcess:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(textwrap.dedent('''
        from tests.system_deps import (  # noqa: F401
            pytest_configure, pytest_runtest_logreport, pytest_runtest_setup, pytest_sessionfinish, pytest_terminal_summary,
        )
    '''))
    (suite / "test_suite.py").write_text(SUITE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PATH": path_env, "PYTHONPATH": str(ROOT)}
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-c", os.devnull, "--rootdir", str(suite), str(suite)]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=suite)


def test_missing_package_skips_with_the_reason_and_passes_outside_ci(tmp_path: Path) -> None:
    result = _run_suite(tmp_path, path_env=str(tmp_path / "empty"), ci=None)
    assert result.returncode == 0, result.stdout
    assert "2 passed" not in result.stdout and "1 passed, 3 skipped" in result.stdout, result.stdout
    assert f"{MISSING}: ffmpeg" in result.stdout
    assert "skipped for missing system packages" in result.stdout and "Under CI (CI=true) this run would fail" in result.stdout


def test_missing_package_fails_the_run_under_ci(tmp_path: Path) -> None:
    result = _run_suite(tmp_path, path_env=str(tmp_path / "empty"), ci="true")
    assert result.returncode == 1, result.stdout
    assert "1 passed, 3 skipped" in result.stdout and "CI is set, so the run fails" in result.stdout


def test_other_skips_do_not_fail_ci(tmp_path: Path) -> None:
    if missing_reason("ffmpeg"):
        pytest.skip(missing_reason("ffmpeg"))
    result = _run_suite(tmp_path, path_env=os.environ["PATH"], ci="true")
    assert result.returncode == 0, result.stdout
    assert "3 passed, 1 skipped" in result.stdout and "missing system packages" not in result.stdout


def test_unknown_requirement_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown system requirement"):
        missing_reason("ffmpg")


def test_postgres_binaries_come_from_the_variable_or_the_newest_debian_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.system_deps import postgres_bin

    monkeypatch.setenv("RECALL_TEST_PG_BIN", str(tmp_path))
    assert postgres_bin() is None  # no initdb there: missing, so the tests needing it skip
    (tmp_path / "initdb").write_text("")
    assert postgres_bin() == str(tmp_path)
    monkeypatch.delenv("RECALL_TEST_PG_BIN")
    found = postgres_bin()
    assert found is None or found.startswith("/usr/lib/postgresql/") and found.endswith("/bin")


def test_browser_tests_need_chromium_with_the_marker_or_the_fixture() -> None:
    from tests.system_deps import _requirements_of

    class Item:
        def __init__(self, markers: dict, fixturenames: tuple = ()) -> None:
            self.markers, self.fixturenames = markers, fixturenames

        def iter_markers(self, name: str):
            return iter(self.markers.get(name, []))

        def get_closest_marker(self, name: str):
            return next(iter(self.markers.get(name, [])), None)

    assert _requirements_of(Item({"browser": [pytest.mark.browser.mark]})) == ["chromium"]
    assert _requirements_of(Item({}, ("page", "browser"))) == ["chromium"]
    assert _requirements_of(Item({"system": [pytest.mark.system("ffmpeg", "sox").mark]})) == ["ffmpeg", "sox"]
    assert _requirements_of(Item({}, ("tmp_path",))) == []
