"""Supply chain: a hashed lock, every install hash-checked, `pip check` in CI, a non-root read-only container.

requirements.lock carries, per package, one version and the sha256 of the file pip installs
(scripts/lock.sh writes it); make (and so .ci/run), the Dockerfile and docker/cluster.Dockerfile install
with --require-hashes, and only the project itself (a folder, which has no hash) goes without, with
--no-deps. No Docker engine runs here: the container files are checked as text, as
tests/test_container.py does.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
LINE = re.compile(r"(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^\s;\\]+)(?P<hashes>( --hash=sha256:[0-9a-f]{64})+)")


def lock_entries() -> dict[str, tuple[str, list[str]]]:
    """canonical name -> (version, sha256 hashes), from every line of the lock that is not a comment."""
    entries: dict[str, tuple[str, list[str]]] = {}
    for number, line in enumerate(LOCK.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = LINE.fullmatch(line)
        assert match, f"requirements.lock:{number} is not `name==version --hash=sha256:...`: {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in entries, f"requirements.lock:{number}: {name} is pinned twice"
        entries[name] = (match["version"], re.findall(r"sha256:([0-9a-f]{64})", match["hashes"]))
    return entries


def test_every_lock_line_is_pinned_with_a_hash() -> None:
    entries = lock_entries()
    assert len(entries) > 50
    for name, (version, hashes) in entries.items():
        Version(version)  # a real version, no wildcard
        assert hashes and len(set(hashes)) == len(hashes), name


def test_lock_covers_pyproject_at_versions_it_allows() -> None:
    """Every dependency pyproject names (extras and build backend included) is pinned, inside its range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    named = [
        *project["project"]["dependencies"],
        *(req for extra in project["project"]["optional-dependencies"].values() for req in extra),
        *project["build-system"]["requires"],
    ]
    entries = lock_entries()
    for text in named:
        requirement = Requirement(text)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue
        name = canonicalize_name(requirement.name)
        assert name in entries, f"pyproject asks for {text!r}, which requirements.lock lacks: run scripts/lock.sh"
        assert requirement.specifier.contains(entries[name][0], prereleases=True), (text, entries[name][0])
    # pip (make and the Dockerfile install it from the lock first) and aisfx (make, --no-deps)
    assert {"pip", "aisfx"} <= set(entries)


def test_torch_is_the_cpu_wheel_alone() -> None:
    version, hashes = lock_entries()["torch"]
    assert version == "2.13.0"
    assert len(hashes) == 1  # one file: the CPU wheel 2.13.0+cpu, so no CUDA build passes the hash check


def test_installed_packages_are_the_locked_ones() -> None:
    """The environment the tests run in was built from the lock (make install)."""
    mismatched = {}
    for name, (version, _) in lock_entries().items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed).public != Version(version).public:
            mismatched[name] = (version, installed)
    assert not mismatched, f"locked vs installed: {mismatched}"
    assert importlib.metadata.version("torch").endswith("+cpu")


def pip_installs(text: str) -> list[str]:
    """Every `pip install ...` command in a Makefile or Dockerfile, comments dropped, continuation lines joined."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    joined = re.sub(r"\\\n\s*", " ", code)
    return [m.group(0) for m in re.finditer(r"pip install [^\n&|;]*", joined)]


def assert_hash_checked(path: Path) -> list[str]:
    """Every install has --require-hashes, but the project's own (`.`), which has --no-deps."""
    installs = pip_installs(path.read_text())
    assert installs, path
    project = []
    for command in installs:
        args = command.split()
        if "." in args:
            assert "--no-deps" in args and "--require-hashes" not in args, command
            project.append(command)
        else:
            assert "--require-hashes" in args, f"{path.name}: {command}"
    return project


def test_makefile_installs_with_require_hashes_and_runs_pip_check() -> None:
    makefile = (ROOT / "Makefile").read_text()
    (project,) = assert_hash_checked(ROOT / "Makefile")
    assert "-e ." in project and "--no-build-isolation" in project  # built by the lock's setuptools
    lock_install = next(c for c in pip_installs(makefile) if "-r $(LOCK)" in c)
    assert "--no-deps" in lock_install
    recipe = makefile.split("$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    assert "pip-check" in recipe  # the install step runs it, so `make test` and .ci/run do
    assert "pip check" in makefile.split("\npip-check:", 1)[1].split("\n\n", 1)[0]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_pip_check_passes() -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    result = subprocess.run(
        ["make", "-s", "--no-print-directory", "pip-check", f"VENV={sys.prefix}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", path.read_text())
    instructions = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            instructions.append((keyword.upper(), " ".join(args.split())))
    return instructions


def final_user(path: Path) -> str:
    users = [args for keyword, args in dockerfile_instructions(path) if keyword == "USER"]
    assert users, f"{path.name} sets no USER"
    user = users[-1]
    assert user.split(":")[0] not in ("root", "0"), user
    return user


def test_dockerfiles_install_with_require_hashes_and_run_as_non_root() -> None:
    (project,) = assert_hash_checked(ROOT / "Dockerfile")
    assert "--no-build-isolation" in project
    cluster = ROOT / "docker" / "cluster.Dockerfile"
    assert assert_hash_checked(cluster) == []
    runs = [args for keyword, args in dockerfile_instructions(ROOT / "Dockerfile") if keyword == "RUN"]
    assert any("pip check" in run for run in runs)
    assert final_user(ROOT / "Dockerfile") == "10001:10001"
    assert final_user(cluster).split(":")[0] in ("10001", "recall")
    useradd = next(run for run in runs if "useradd" in run)
    assert "--uid 10001" in useradd and "--home-dir /home/recall" in useradd


def test_compose_runs_the_service_on_a_read_only_root_with_writable_data_and_caches() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service = compose["services"]["recall"]
    assert service["read_only"] is True
    tmpfs = dict(entry.partition(":")[::2] for entry in service["tmpfs"])
    assert set(tmpfs) == {"/tmp", "/home/recall/.cache"}
    # ~/.cache belongs to the image's user (a bare tmpfs would be root's); /tmp is world-writable
    assert {"uid=10001", "gid=10001"} <= set(tmpfs["/home/recall/.cache"].split(","))
    assert "mode=1777" in tmpfs["/tmp"].split(",")
    writable = ["/data", *tmpfs]
    assert service["volumes"] == ["recall-data:/data"]
    # every path the image sends writes to lies on the volume or a tmpfs; the rest (~/.cache/huggingface,
    # ~/.cache/recall, onnxruntime's ~/.cache/Microsoft) follows HOME=/home/recall
    env = dict(
        pair.split("=", 1)
        for keyword, args in dockerfile_instructions(ROOT / "Dockerfile") if keyword == "ENV"
        for pair in args.split()
    )
    assert {"RECALL_DATA_DIR", "NUMBA_CACHE_DIR", "MPLCONFIGDIR"} <= set(env)
    for variable in ("RECALL_DATA_DIR", "NUMBA_CACHE_DIR", "MPLCONFIGDIR", "HF_HOME", "XDG_CACHE_HOME",
                     "RECALL_FRONTENDS_CACHE", "TORCHINDUCTOR_CACHE_DIR", "TMPDIR"):
        if variable in env:
            path = env[variable]
            assert any(path == root or path.startswith(root + "/") for root in writable), (variable, path)
