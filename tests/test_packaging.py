"""The container installs the project as a wheel (`pip install .`): checkpoints and the page must be in it."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_carries_default_checkpoints_and_web_page(tmp_path):
    # Build from a copy of what the wheel is made of: setuptools leaves a build/ folder in the
    # tree it builds, and a stale one there could carry deleted files into later wheels.
    source = tmp_path / "src"
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    shutil.copy(ROOT / "README.md", source)
    for package in ("app", "recall"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("recall-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    checkpoints = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "app/assets/models").rglob("*") if p.is_file())
    assert checkpoints and set(checkpoints) <= names
    # the default audio encoder's pretrained front-end (converted weights) ships too
    assert {"app/assets/frontends/speech-embedding/weights.safetensors",
            "app/assets/frontends/speech-embedding/config.json"} <= names
    assert "app/web/static/index.html" in names
    assert {"recall/__init__.py", "recall/client.py"} <= names  # the client: `from recall import RecallClient`
    # every module ships (a folder without __init__.py would be left out of the wheel silently)
    sources = {p.relative_to(ROOT).as_posix() for package in ("app", "recall") for p in (ROOT / package).rglob("*.py")}
    assert not sources - names, sorted(sources - names)[:10]
    demo = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "app/assets/demo").rglob("*") if p.is_file())
    assert "app/assets/demo/manifest.jsonl" in demo and set(demo) <= names  # the demo seeds from these
    assert any(n.endswith("entry_points.txt") for n in names)
