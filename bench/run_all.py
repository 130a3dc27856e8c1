"""`make bench`: every speed benchmark, each writing its JSON into bench/results/.

Quality reports (bench.audio_quality, bench.mtc_demo, recall train image-text --report) need the
training data in ../shared/data and are run separately; see the README.
"""

from __future__ import annotations

import subprocess
import sys

BENCHES = [
    ["bench.bench_index"],
    ["bench.bench_service"],
    ["bench.bench_image_text"],
    ["bench.bench_audio"],
    ["bench.query_path"],  # the real server on loopback: latency, throughput at 1-64 clients, formats, text, ingest
]


def main() -> int:
    failed = []
    for bench in BENCHES:
        print(f"== {' '.join(bench)}", flush=True)
        if subprocess.call([sys.executable, "-m", *bench]) != 0:
            failed.append(bench[0])
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
