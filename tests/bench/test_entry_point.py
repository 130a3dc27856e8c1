"""`python -m bench`: one entry point that lists every benchmark and runs named ones."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.__main__ import HELPERS, SPEED, benchmarks, main

ROOT = Path(__file__).resolve().parents[2]


def test_it_lists_every_benchmark_module_once_with_what_it_measures() -> None:
    listed = benchmarks()
    modules = {f"{p.parent.name}.{p.stem}" for p in (ROOT / "bench").glob("*/*.py") if not p.name.startswith("_")}
    assert set(listed) == modules - HELPERS and set(SPEED) <= set(listed)
    assert all(line for line in listed.values())  # every benchmark says what it measures
    out = subprocess.run([sys.executable, "-m", "bench"], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60)
    assert "audio.generalisation" in out.stdout and "[speed]" in out.stdout


def test_an_unknown_name_is_refused_before_anything_runs(capsys) -> None:
    assert main(["run", "audio.nope"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert main(["bogus"]) == 2
