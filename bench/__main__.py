"""One entry point for every benchmark: ``python -m bench`` lists them, ``python -m bench speed`` runs the speed set.

    python -m bench                  # every benchmark: folder.module and what it measures
    python -m bench speed            # `make bench`: the speed benchmarks, each writing its JSON into bench/results/
    python -m bench run audio.window_cost index.index_kinds -- --repeats 3   # named ones; their arguments after --

Each benchmark is also a module of its own (``python -m bench.audio.generalisation --help``). Quality benchmarks
need the training data in ../shared/data and a device benchmark needs CUDA; the README says which is which.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# `make bench`: what runs on any machine with the package alone, each writing bench/results/<name>.json
SPEED = ["index.index", "service.service", "image.image_text", "audio.audio", "service.query_path"]
# modules the benchmarks share, not benchmarks of their own
HELPERS = {"audio.sets", "latency.interleaved", "service.load", "service.query_corpus", "service.profile_breakdown", "service.query_path_report",
           "index.bandwidth", "reliability.fuzz_seed"}


def benchmarks() -> dict[str, str]:
    """``folder.module`` -> the first line of its docstring, for every benchmark module under bench/."""
    found = {}
    for path in sorted(HERE.glob("*/*.py")):
        name = f"{path.parent.name}.{path.stem}"
        if path.name.startswith("_") or name in HELPERS:
            continue
        doc = (ast.get_docstring(ast.parse(path.read_text())) or "").strip()
        found[name] = doc.splitlines()[0] if doc else ""
    return found


def run(names: list[str], extra: list[str]) -> int:
    unknown = sorted(set(names) - set(benchmarks()))
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)}; `python -m bench` lists them", file=sys.stderr)
        return 2
    failed = []
    for name in names:
        print(f"== bench.{name}", flush=True)
        if subprocess.call([sys.executable, "-m", f"bench.{name}", *extra]) != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str]) -> int:
    args, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    if not args:
        for name, line in benchmarks().items():
            print(f"{name:28s} {'[speed] ' if name in SPEED else ''}{line}")
        return 0
    if args == ["speed"]:
        return run(SPEED, extra)
    if args[0] == "run" and len(args) > 1:
        return run(args[1:], extra)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
