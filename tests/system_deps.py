"""System packages the tests use, and the one way a test asks for them.

A test that needs a program from a Debian package says so (``@pytest.mark.system("ffmpeg")``,
or ``require_system("ffmpeg")`` inside a fixture, as the ``pg_server`` fixture does for
PostgreSQL); browser tests (marker ``browser``) need chromium without saying so. When the program
is missing the test is skipped with a reason that names the package and the command installing
it, never failed or errored. `make test` installs the packages first (scripts/system_deps.sh), so
such a skip means someone ran pytest on a machine without them; under CI (``CI=true``) the
session then fails, because CI exists to run everything.

tests/conftest.py imports the hooks below into its namespace, which is how pytest finds them.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# Every skip for a missing package starts with this; the session-end check looks for it.
MISSING = "missing system package"
CHROMIUM = "/usr/bin/chromium"  # Debian's, as tests/web/conftest.py launches it


def postgres_bin() -> str | None:
    """The directory of initdb and pg_ctl: $RECALL_TEST_PG_BIN, else Debian's newest."""
    if configured := os.environ.get("RECALL_TEST_PG_BIN"):
        return configured if (Path(configured) / "initdb").is_file() else None
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return str(Path(found[-1]).parent) if found else None


# requirement -> (Debian package, probe that is truthy when it is there)
REQUIREMENTS: dict[str, tuple[str, Callable[[], object]]] = {
    "ffmpeg": ("ffmpeg", lambda: shutil.which("ffmpeg")),
    "sox": ("sox", lambda: shutil.which("sox")),
    "espeak-ng": ("espeak-ng", lambda: shutil.which("espeak-ng")),
    "chromium": ("chromium", lambda: os.access(CHROMIUM, os.X_OK)),
    "chromedriver": ("chromium-driver", lambda: shutil.which("chromedriver")),
    "postgresql": ("postgresql", postgres_bin),
    "cc": ("gcc", lambda: shutil.which("cc")),  # a C compiler: the custom-op library the ONNX tests build
}


def missing_reason(*names: str) -> str | None:
    """The skip reason when any of ``names`` (keys of REQUIREMENTS) is missing, else None."""
    unknown = [name for name in names if name not in REQUIREMENTS]
    if unknown:
        raise ValueError(f"unknown system requirement(s) {unknown}; known: {sorted(REQUIREMENTS)}")
    packages = sorted({REQUIREMENTS[name][0] for name in names if not REQUIREMENTS[name][1]()})
    if not packages:
        return None
    listed = " ".join(packages)
    return f"{MISSING}: {listed} (make test installs it; or: sudo apt-get install -y --no-install-recommends {listed})"


def require_system(*names: str) -> None:
    """Skip the calling test (or every test using the calling fixture) unless ``names`` are there."""
    reason = missing_reason(*names)
    if reason:
        pytest.skip(reason)


def _requirements_of(item: pytest.Item) -> list[str]:
    names = [name for marker in item.iter_markers("system") for name in marker.args]
    # the browser marker, or the chromium-launching fixture of tests/web/conftest.py without it
    if item.get_closest_marker("browser") or "browser" in getattr(item, "fixturenames", ()):
        names.append("chromium")
    return names


# ---------------------------------------------------------------- hooks (re-exported by conftest)

# (node id, reason) of every test skipped for a missing package in this session
_skipped: list[tuple[str, str]] = []


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "system(*names): needs these system programs (tests/system_deps.py)")
    _skipped.clear()


def pytest_runtest_setup(item: pytest.Item) -> None:
    require_system(*_requirements_of(item))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # a skip's longrepr is (path, line, "Skipped: <reason>")
    if report.skipped and isinstance(report.longrepr, tuple) and MISSING in str(report.longrepr[2]):
        _skipped.append((report.nodeid, str(report.longrepr[2]).removeprefix("Skipped: ")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # pytest exits with session.exitstatus as it stands after this hook
    if in_ci() and _skipped and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    if not _skipped:
        return
    packages = sorted({p for _, reason in _skipped for p in reason.split(": ", 1)[1].split(" (")[0].split()})
    verdict = "CI is set, so the run fails." if in_ci() else "Under CI (CI=true) this run would fail."
    terminalreporter.section("skipped for missing system packages", sep="=", red=in_ci(), yellow=not in_ci())
    terminalreporter.line(f"{len(_skipped)} test(s) did not run; missing: {' '.join(packages)}. {verdict}")
    terminalreporter.line(f"Install with: sudo apt-get install -y --no-install-recommends {' '.join(packages)}")
