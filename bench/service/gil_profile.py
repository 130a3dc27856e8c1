"""What holds the GIL while 16 clients send text searches: py-spy ``--gil`` on the real server, per query.

Issue 35's text query at 16 clients was thought bound by Python work the GIL serialises. This measures it:
``recall serve`` on loopback over a copy of a ``bench.service.query_corpus`` collection of ``--images`` images
(as ``bench.service.text_query_ab``), ``--clients`` clients each sending new sentences (``{"text", "k": 10}``,
re-ranked) for ``--seconds``, with py-spy (not a dependency: ``pip install py-spy``) sampling only the thread
that holds the GIL. The samples are split by category (``bench.service.profile_breakdown``'s, innermost
frame first) into GIL-held milliseconds per query; the JSON also has q/s, p50 and the server's CPU per query
of the same phase (py-spy's sampling costs a little of each: compare variants, not the q/s with other files).

``--baseline REV`` runs the ``app/`` of git revision REV the same way in the same run, servers taking turns
over ``--rounds`` rounds.

    python -m bench.service.gil_profile --baseline HEAD~3 [--rounds 2] [--out bench/results/gil_profile.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.service import query_corpus as corpus
from bench.service.load import json_request
from bench.service.profile_breakdown import breakdown
from bench.service.query_path import RESULTS, ROOT, Server, _export_tree, _load, _texts, measured

RATE_HZ = 500


def gil_phase(server: Server, texts: list[str], clients: int, seconds: float, raw: Path) -> dict[str, Any]:
    """One loaded phase with py-spy --gil attached; every sentence new to this server."""
    path = f"/v1/collections/{corpus.IMAGE_COLLECTION}/search"
    requests = [json_request(path, {"text": t, "k": 10}) for t in texts]
    asyncio.run(measured(server, requests[-50:], 1, 50, 30))  # first-touch costs, with sentences the phase never sends
    assert server.proc is not None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    proc = subprocess.Popen([spy, "record", "--pid", str(server.proc.pid), "--rate", str(RATE_HZ), "--gil", "--nonblocking",
                             "--format", "raw", "--output", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # let py-spy attach
    row = asyncio.run(measured(server, requests[:-50], clients, len(requests) - 50, seconds))
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    proc.wait(60)
    gil = breakdown(raw, row["n"], RATE_HZ)
    # every sample holds the GIL: those whose innermost frame is an event loop's or a pool's idle frame are the
    # loop's own work in C (uvloop runs its callbacks inside Runner.run), not waiting, so they count too
    return {"load": row, "gil_held_ms_per_query": gil["busy_total_ms_per_query"] + gil["waiting_ms_per_query"],
            "gil_held_by_category": {**gil["thread_ms_per_query"], "event loop and pools (idle frames)": gil["waiting_ms_per_query"]},
            "samples": gil["samples"]}


def _medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    """A variant's medians over its rounds: GIL-held ms a query, q/s, p50 and server CPU a query."""
    pick = {"gil_held_ms_per_query": lambda r: r["gil_held_ms_per_query"], "queries_per_s": lambda r: r["load"]["queries_per_s"],
            "p50_ms": lambda r: r["load"]["p50_ms"], "server_cpu_ms_per_query": lambda r: r["load"]["server_cpu_ms_per_query"]}
    return {key: statistics.median(get(r) for r in rows) for key, get in pick.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git revision whose app/ runs the same phases in the same run")
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--out", type=Path, default=RESULTS / "gil_profile.json")
    args = parser.parse_args(argv)
    if not (shutil.which("py-spy") or (Path(sys.executable).parent / "py-spy").is_file()):
        parser.error("this bench attaches py-spy, which is not installed: pip install py-spy (it is no dependency)")
    from app.settings import Settings

    encoders = Settings().encoders
    texts = _texts(4000 * args.rounds * 2)
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_before": _load(), "clients": args.clients,
                              "seconds": args.seconds, "images": args.images, "rate_hz": RATE_HZ,
                              "head": subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip(),
                              "rounds": []}
    with tempfile.TemporaryDirectory(prefix="recall-gil-") as tmp:
        trees = {"working_tree": ROOT}
        if args.baseline:
            (Path(tmp) / "baseline").mkdir()
            result["baseline"] = _export_tree(args.baseline, Path(tmp) / "baseline")
            trees[f"@{args.baseline}"] = Path(tmp) / "baseline"
        chunk = len(texts) // (args.rounds * len(trees))
        for r in range(args.rounds):
            for i, (label, tree) in enumerate(list(trees.items())[:: 1 if r % 2 == 0 else -1]):
                data = Path(tmp) / f"data-{r}-{i}"
                result["corpus"] = corpus.prepared(args.cache, encoders.default_audio, encoders.default_image, 1000, args.images, data)
                server = Server(tree, data, label)
                server.start()
                try:
                    start = (r * len(trees) + i) * chunk
                    row = gil_phase(server, texts[start:start + chunk], args.clients, args.seconds, Path(tmp) / "gil.txt")
                finally:
                    server.stop()
                result["rounds"].append({"round": r, "variant": label, "at_load": _load(), **row})
                print(json.dumps({"round": r, "variant": label, "gil_held_ms_per_query": row["gil_held_ms_per_query"],
                                  "queries_per_s": row["load"]["queries_per_s"]}), flush=True)
                shutil.rmtree(data, ignore_errors=True)
    result["medians"] = {label: _medians([r for r in result["rounds"] if r["variant"] == label]) for label in trees}
    result["load_after"] = _load()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
