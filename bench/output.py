"""Where a benchmark's result goes: one JSON file under bench/results (the path it is given), echoed to stdout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_results(result: dict[str, Any], path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
