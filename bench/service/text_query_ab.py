"""Text query speed under issue 35's rule: the MiniLM query precision A/B, speed and quality in one run.

    python -m bench.service.text_query_ab [--rounds 3] [--images 10000] [--changed int8_token,float32,int8]
    python -m bench.service.text_query_ab --baseline HEAD~2 --unchanged int8_token --changed "" --skip quality,in_process

Writes ``bench/results/text_query_ab.json``. In one run, on the same machine, for the unchanged precision
and every changed one (``--changed``, comma-separated):

* ``quality``: per changed precision, ``bench.service.text_quality`` on the text-to-image dev sets (R@10
  of the unchanged and the changed precision, the drop, the top-10 overlap, and whether the rule holds);
* ``in_process``: one sentence embedded by the encoder (MiniLM and the text tower), the precisions
  taking turns, every sentence new (the encoder's query cache never hits);
* ``interleaved``: every precision's server up at once, one client alternating between them request by
  request, ``--passes`` new sentences each, the same sentences in the same order on every server
  (``bench.latency.interleaved``): the median paired difference against the unchanged precision and its
  bootstrap interval, the figure that decides a one-client p50 change on this drifting machine;
* ``http``: the real server (``recall serve`` on loopback, ``bench.service.query_path.Server``) on a copy
  of a ``bench.service.query_corpus`` collection of ``--images`` images, once per precision
  (``RECALL_ENCODERS__TEXT_QUERY_PRECISION``), servers taking turns over ``--rounds`` rounds, the order
  rotating each round (the shared machine's drift spreads over all): one client sending text searches as a new user would
  (``{"text": ..., "k": 10}``: re-ranked by the head, the service's default), then 16 clients for
  ``--seconds``. Every sentence is new to the server it is sent to (each server starts with an empty
  query cache). Medians over rounds per variant.

``--baseline REV`` adds, for every precision, a server running the ``app/`` package of git revision REV
(``git archive``), labelled ``<precision>@<REV>``, in the same rounds: the same-run A/B of a code change
that leaves the precision as it is (issue 35's speed work; bench/results/text_query_ab_*.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.service import query_corpus as corpus
from bench.latency.interleaved import alternate
from bench.service.load import json_request, run_load
from bench.service.query_path import RESULTS, ROOT, Server, _export_tree, _load, _texts, measured
from bench.service.text_quality import DEFAULT_PHOTOS, encoder_with_precision, qualities

OUT = RESULTS / "text_query_ab.json"
KEYS = ("p50_ms", "p99_ms", "queries_per_s", "server_cpu_ms_per_query", "machine_busy_fraction")
ONE_CLIENT_QUERIES = 300
WARMUP = 10  # first requests per server in each one-client phase, not measured (first-touch costs)


def in_process(precisions: list[str], texts: list[str]) -> dict[str, Any]:
    """Median ms of ``encode_text`` for one new sentence, the precisions taking turns."""
    import torch

    torch.set_num_threads(1)  # as the service's query batches run
    encoders = {p: encoder_with_precision(p) for p in precisions}
    for encoder in encoders.values():
        encoder.encode_text(["warm up"])
    times: dict[str, list[float]] = {p: [] for p in encoders}
    for text in texts:
        for precision, encoder in encoders.items():
            started = time.perf_counter()
            encoder.encode_text([text])
            times[precision].append(time.perf_counter() - started)
    return {p: {"p50_ms": 1000 * float(np.median(t)), "p99_ms": 1000 * float(np.percentile(t, 99)), "n": len(t)}
            for p, t in times.items()}


async def _one_server(server: Server, texts: list[str], seconds: float) -> dict[str, Any]:
    path = f"/v1/collections/{corpus.IMAGE_COLLECTION}/search"
    requests = [json_request(path, {"text": t, "k": 10}) for t in texts]
    await run_load(server.url, requests[:WARMUP], 1, WARMUP, 30, kind="raw")  # first-touch costs; not measured
    one = await measured(server, requests[WARMUP:WARMUP + ONE_CLIENT_QUERIES], 1, ONE_CLIENT_QUERIES, 120)
    rest = requests[WARMUP + ONE_CLIENT_QUERIES:]
    sixteen = await measured(server, rest, 16, len(rest), seconds)  # bounded by time; no sentence repeats
    return {"one_client": one, "sixteen_clients": sixteen}


def medians(rounds: list[dict[str, Any]], variant: str) -> dict[str, dict[str, float]]:
    rows = [r for r in rounds if r["variant"] == variant]
    return {phase: {k: statistics.median(r[phase][k] for r in rows) for k in KEYS}
            for phase in ("one_client", "sixteen_clients")}


def http(precisions: list[str], texts: list[str], images: int, rounds: int, seconds: float,
         cache: Path, baseline: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"images": images, "rounds": [], "load_before": _load()}
    with tempfile.TemporaryDirectory(prefix="recall-textab-") as tmp:
        seed, variants = _corpus_and_variants(Path(tmp), precisions, images, cache, baseline, out)
        for round_number in range(rounds):
            shift = round_number % len(variants)
            for label, tree, precision in variants[shift:] + variants[:shift]:
                data = Path(tmp) / f"data-{len(out['rounds'])}"
                shutil.copytree(seed, data)
                server = Server(tree, data, label)
                server.env["RECALL_ENCODERS__TEXT_QUERY_PRECISION"] = precision
                server.start()
                try:
                    row = asyncio.run(_one_server(server, texts, seconds))
                finally:
                    server.stop()
                    shutil.rmtree(data, ignore_errors=True)
                out["rounds"].append({"round": round_number, "variant": label, "at": time.time(), "load": _load(), **row})
                print(round_number, label, {p: (round(v["p50_ms"], 2), round(v["queries_per_s"], 1)) for p, v in row.items()},
                      flush=True)
    out["medians"] = {label: medians(out["rounds"], label) for label, _, _ in variants}
    out["load_after"] = _load()
    return out


def http_interleaved(precisions: list[str], texts: list[str], images: int, passes: int, cache: Path,
                     baseline: str | None = None) -> dict[str, Any]:
    """Every variant's server up at once, one client alternating between them request by request
    (``bench.latency.interleaved``): each server gets the same new sentences in the same order, so every
    sentence's latency on a changed variant is paired with its latency on the unchanged one, moments apart."""
    out: dict[str, Any] = {"images": images, "load_before": _load()}
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="recall-textab-") as tmp:
        seed, variants = _corpus_and_variants(Path(tmp), precisions, images, cache, baseline, out)
        try:
            for label, tree, precision in variants:
                data = Path(tmp) / f"data-{len(servers)}"
                shutil.copytree(seed, data)
                server = Server(tree, data, label)
                server.env["RECALL_ENCODERS__TEXT_QUERY_PRECISION"] = precision
                server.start()
                servers.append(server)
            path = f"/v1/collections/{corpus.IMAGE_COLLECTION}/search"
            requests = [json_request(path, {"text": t, "k": 10}) for t in texts[:passes + WARMUP]]
            urls = {s.label: ("127.0.0.1", s.port) for s in servers}
            out.update(asyncio.run(alternate(urls, {label: requests for label in urls}, passes, WARMUP)))
        finally:
            for server in servers:
                server.stop()
    out["load_after"] = _load()
    for label, row in out["paired"].items():
        print(f"interleaved: {label} against {out['paired_against']}: median paired difference "
              f"{row['median_diff_ms']:+.2f} ms (95% {row['ci95_low_ms']:+.2f} .. {row['ci95_high_ms']:+.2f})", flush=True)
    return out


def _corpus_and_variants(tmp: Path, precisions: list[str], images: int, cache: Path, baseline: str | None,
                         out: dict[str, Any]) -> tuple[Path, list[tuple[str, Path, str]]]:
    """The image corpus copied into ``tmp`` (its ``corpus`` info and any baseline's commit noted in ``out``) and the
    variants to serve: (label, source tree, precision), the working tree's app/ and, with a baseline REV, REV's."""
    from app.settings import Settings

    encoders = Settings().encoders
    seed = tmp / "corpus"
    # the corpus builder makes a small audio collection beside the images; it is dropped below
    out["corpus"] = corpus.prepared(cache, encoders.default_audio, encoders.default_image, 1000, images, seed)
    _images_only(seed)
    variants = [(p, ROOT, p) for p in precisions]
    if baseline:
        (tmp / "baseline").mkdir()
        out["baseline"] = {"rev": baseline, "commit": _export_tree(baseline, tmp / "baseline")}
        variants += [(f"{p}@{baseline}", tmp / "baseline", p) for p in precisions]
    return seed, variants


def _images_only(data_dir: Path) -> None:
    """Drop the corpus' audio collection: text queries never read it, and a baseline revision may lack the
    audio encoder it was embedded with (a service that cannot load a collection's encoder is not ready)."""
    from app.storage.catalog import Catalog

    catalog = Catalog(data_dir / "catalog.sqlite3")
    try:
        catalog.delete_collection(corpus.AUDIO_COLLECTION)
    finally:
        catalog.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unchanged", default="half")
    parser.add_argument("--changed", default="int8_token,float32,int8", help="comma-separated precisions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=15.0, help="16-client phase length per round and variant")
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--photos", type=Path, default=DEFAULT_PHOTOS, help="the COCO photos (held-out dev set)")
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: quality,in_process,interleaved,http")
    parser.add_argument("--passes", type=int, default=600, help="interleaved one-client requests per server")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "recall-bench-corpus")
    parser.add_argument("--baseline", help="git revision whose app/ also serves every precision (a same-run A/B of a code change)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))
    texts = _texts(4000)  # distinct generated captions (not the dev sets' sentences)
    changed = [p for p in args.changed.split(",") if p]
    precisions = [args.unchanged, *changed]
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M"), "cpus": os.cpu_count(),
                              "unchanged": args.unchanged, "changed": changed,
                              "note": "one run: quality, in-process and HTTP figures are comparable only within this file"}
    if "quality" not in skip:
        result["quality"] = qualities(args.photos, args.unchanged, changed)
        print("quality rule met:", {p: q["rule_met"] for p, q in result["quality"].items()}, flush=True)
    if "in_process" not in skip:
        result["in_process"] = in_process(precisions, texts[-300:])
        print("in process:", result["in_process"], flush=True)
    if "interleaved" not in skip:
        result["interleaved"] = http_interleaved(precisions, texts[:-300], args.images, args.passes, args.cache, args.baseline)
    if "http" not in skip:
        result["http"] = http(precisions, texts[:-300], args.images, args.rounds, args.seconds, args.cache, args.baseline)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result.get(k) for k in ("in_process",)} | {"http_medians": result.get("http", {}).get("medians"),
                      "interleaved_paired": result.get("interleaved", {}).get("paired")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
