"""Schemathesis against the embedded service for minutes: every phase, every route, 0 server errors.

The service runs as a new user would start it (uvicorn on loopback, API keys on, its own data
directory) with a collection of audio and one of images seeded under fixed names. Schemathesis 4
then runs its phases in cycles until the time is up: examples (the fixed names are the path
examples), coverage (boundary and invalid values of every parameter), fuzzing (generated requests;
path parameters mix in the seeded names and ids, bodies mix in real media, so ingest, search and
items are reached, not only their 404s) and stateful (sequences along the document's OpenAPI links:
create collection -> ingest -> read item -> search by it -> delete -> read again). Every response
is checked: no 5xx, a status code the route documents, the documented content type and body schema,
negative data refused, deleted resources gone, created ones readable, auth enforced.

The seeded collections are restored every few seconds (a stateful sequence may delete them).
Writes bench/results/fuzz.json: the duration, requests per phase and operation, the status codes
seen, and each failure with a curl line that reproduces it. Exits 1 when anything failed.

    python -m bench.reliability.fuzz --minutes 20
    python -m bench.reliability.fuzz --minutes 20 --cluster     # bench/results/fuzz_cluster.json
    python -m bench.reliability.fuzz --minutes 2 --out /tmp/fuzz.json

``--cluster``: the same against cluster mode as deployed, ``recall serve`` in its own process on a PostgreSQL
catalog and two Ray index shard actors (PostgreSQL and a Ray head started on 127.0.0.1 for the run, as the
cluster tests start them; needs the postgresql Debian package).

tests/reliability/test_fuzz_api.py runs the same seeding, hooks and checks in bounded form in the suite.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx

from bench.reliability.fuzz_cluster import cluster_service
from bench.reliability.fuzz_seed import (CLEAN_BODIES, KEY, MAX_UPLOAD_BYTES, NAMES, SCRATCH, STORED,  # noqa: F401 (KEY: re-exported)
                             SYNC_INGEST_FILES, prune, seed, service_settings)


def fuzz_document(spec: dict[str, Any]) -> dict[str, Any]:
    """The served document with the seeded names as path examples, so the examples phase hits them.

    A copy: the served document stays free of test data. DELETE routes get the scratch targets.
    """
    spec = copy.deepcopy(spec)
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            values = SCRATCH.get(path, {}) if method == "delete" else STORED[0]
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in values and parameter["name"] != "key_id":
                    parameter["example"] = values[parameter["name"]]
    return spec


# ids (Case.id) of the cases whose body flatmap_case swapped for a known-valid one: no negative test
# any more, whatever their metadata says (schemathesis rates a multipart body of raw bytes as
# schema-violating, since JSON Schema has no bytes)
REPLACED: set[str] = set()


def build_schema(spec: dict[str, Any], *, seeded: dict[str, list[str]], mix_path_parameters: bool = True,
                 config: Any = None, infer_links: bool = True) -> Any:
    """A schemathesis schema of ``spec`` with the hooks that make generated requests reach the core.

    ``seeded``: runtime ids by path parameter (filled once the service runs); a case whose body is
    swapped for a known-valid one goes into :data:`REPLACED`.
    ``mix_path_parameters=False`` for the stateful phase, whose links supply the path parameters.
    ``config``: a SchemathesisConfig for an engine run (bench); the suite passes its settings per test.
    ``infer_links=False``: the stateful phase follows the document's links only, not the ones
    schemathesis guesses from the schemas (the suite's bounded run spends its steps on those).
    """
    import schemathesis
    from hypothesis import strategies as st
    from schemathesis.config import HealthCheck
    from schemathesis.config._phases import InferenceConfig

    schema = schemathesis.openapi.from_dict(spec, config=config)
    if not infer_links:
        schema.config.phases.stateful.inference = InferenceConfig(algorithms=[])
    # generation speed depends on how busy the machine is; a slow draw must not fail the run
    schema.config.suppress_health_check = [HealthCheck.too_slow, HealthCheck.filter_too_much]

    if mix_path_parameters:
        @schema.hook
        def flatmap_path_parameters(context, path_parameters):
            # the generated value or one of the seeded ones, equally likely; DELETE routes get only a
            # scratch target to remove, so the other routes keep their collections and items
            if not path_parameters:
                return st.just(path_parameters)
            if context.operation.method.upper() == "DELETE":
                return st.sampled_from([path_parameters, SCRATCH[context.operation.path]])
            if "item_id" in path_parameters:  # a stored item: both parameters must agree
                return st.one_of(st.just(path_parameters), st.sampled_from(STORED).map(lambda p: {**path_parameters, **p}))
            defaults = {"name": NAMES}
            choices = {}
            for key, value in path_parameters.items():
                known = seeded.get(key, defaults.get(key, []))
                choices[key] = st.sampled_from([value, *known]) if known else st.just(value)
            return st.fixed_dictionaries(choices)

    # a new collection a stateful sequence can go on with (generated bodies mostly name an unknown
    # encoder or a hop longer than the window: 422); its name says its modality (see _modality)
    new_collection = st.tuples(st.sampled_from(["audio", "image"]), st.from_regex(r"\A[a-z0-9]{6,12}\Z")).map(
        lambda pair: (None, {"name": f"fz-{pair[0][0]}-{pair[1]}", "modality": pair[0]}))

    @schema.hook
    def flatmap_case(context, case):
        _drop_framing_headers(case)
        # Generated bodies rarely get past decoding (random bytes) or id lookups; mix in requests
        # built from real media and stored ids, so the success paths are fuzzed too.
        key = (case.operation.method.upper(), case.operation.path, case.media_type)
        pairs = CLEAN_BODIES.get(key, [])
        if not mix_path_parameters:  # a stateful step keeps its linked collection: bodies of its modality
            modality = _modality((case.path_parameters or {}).get("name", ""))
            pairs = [pair for pair in pairs if _modality(pair[0]) == modality]
        clean = st.sampled_from(pairs) if pairs else None
        if key == ("POST", "/v1/collections", "application/json"):
            clean = new_collection
        positive = case.meta is not None and case.meta.generation.mode == schemathesis.GenerationMode.POSITIVE
        if clean is None or not positive or case.method.upper() != case.operation.method.upper():
            return st.just(case)
        return st.one_of(st.just(case), clean.map(
            lambda pair: _with_body(case, *pair, keep_name=not mix_path_parameters)))

    return schema


# HTTP's own framing headers: a generated value (the cluster run of 2026-11-27 sent `Content-Length: -uJ;Rbq`)
# makes the request unparsable HTTP, which uvicorn's parser refuses with a plain-text 400 before the service
# sees it. That is the HTTP layer's answer to something that is not an HTTP request, not a route's, and no
# OpenAPI document can describe it; the client library computes these headers itself.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "host", "connection", "te", "trailer", "upgrade",
                             "keep-alive", "proxy-connection", "expect"})


def _drop_framing_headers(case: Any) -> None:
    for name in [name for name in (case.headers or {}) if name.lower() in FRAMING_HEADERS]:
        del case.headers[name]


def _modality(name: str) -> str:
    """The modality of a seeded collection, or of one the hook created (``fz-a-...``, ``fz-i-...``)."""
    return "image" if name == "fz-image" or name.startswith("fz-i-") else "audio"


def _with_body(case: Any, collection: str | None, body: Any, *, keep_name: bool) -> Any:
    # stateful steps keep the collection their link named (the body may not fit it: a 415 is fine)
    if collection is not None and not keep_name:
        case.path_parameters = {**(case.path_parameters or {}), "name": collection}
    case.body = copy.deepcopy(body)  # a link may merge fields into it: never into the shared template
    REPLACED.add(case.id)
    return case


# Not run, by design: positive_data_acceptance expects any schema-valid request to be accepted; but a
# `format: binary` part is schema-valid whatever its bytes (the service answers 415/422 for what it
# cannot decode), and cross-field rules (hop_s <= window_s, one id per file, an existing encoder)
# are not expressible in the schema. Invalid requests must still be refused with a 4xx:
# negative_data_rejection runs, as negative_data_rejection_of_generated_data (below) in the engine,
# which leaves out the cases whose generated body was swapped for a valid one.
EXCLUDED_CHECKS = ["positive_data_acceptance", "negative_data_rejection"]
# DELETE .../items/x/media is a real request: it deletes the item "x/media" (ids may hold '/'), so a
# 405 there rightly lists DELETE in Allow although the document's /media entry has only GET
MEDIA_PATH = "/media$"


_REGISTERED: list[Any] = []


def _register_checks() -> None:
    """Register the engine's custom check once per process (schemathesis keeps a global registry)."""
    import schemathesis
    from schemathesis.specs.openapi.checks import negative_data_rejection

    if _REGISTERED:
        return

    @schemathesis.check
    def negative_data_rejection_of_generated_data(ctx: Any, response: Any, case: Any) -> bool | None:
        if case.id in REPLACED:
            return None
        return negative_data_rejection(ctx, response, case)

    _REGISTERED.append(negative_data_rejection_of_generated_data)


def engine_config(url: str, seconds: float, workers: int = 1) -> Any:
    from schemathesis.config import SchemathesisConfig

    return SchemathesisConfig.from_dict({
        "base-url": url,
        # the key through schemathesis' auth, for both documented schemes: it then sends a valid key
        # (or, in its auth checks, none) and never a generated one beside the real key (X-API-Key
        # wins, so a junk Authorization next to it was "accepted" and read as a failure)
        "auth": {"openapi": {"apiKey": {"api_key": KEY}, "bearer": {"bearer": KEY}}},
        "max-time": int(seconds),
        "workers": workers,
        "request-timeout": 60,
        "continue-on-failure": True,
        "checks": {name: {"enabled": False} for name in EXCLUDED_CHECKS},
        "operations": [{"include-path-regex": MEDIA_PATH, "checks": {"allow_header_conformance": {"enabled": False}}}],
    })


STATELESS = ["examples", "coverage", "fuzzing"]
STATEFUL_KEEP_S = 20.0  # a stateful sequence lasts seconds: its collections are pruned once this old


def rounds(seconds: float, stateful_share: float) -> list[tuple[list[str], float]]:
    """The phases each execution runs and its time. Share 0: one execution of every phase in turn, where a slow
    service can spend the whole budget before the stateful phase starts (the cluster run of 2026-11-27 under a
    load of 20-40: 974 requests, no stateful sequence); a share > 0 gives the stateful phase its own time."""
    if not stateful_share:
        return [([*STATELESS, "stateful"], seconds)]
    return [(STATELESS, seconds * (1 - stateful_share)), (["stateful"], seconds * stateful_share)]


def run_fuzz(url: str, seconds: float, seeded: dict[str, list[str]], workers: int = 1,
             reseed_every_s: float = 5.0, stateful_share: float = 0.0, prune_old: bool = False) -> dict[str, Any]:
    """All phases in cycles for ``seconds`` against ``url``; what they sent, what came back, what failed."""
    from schemathesis.engine import events, from_schema

    _register_checks()

    served = httpx.get(f"{url}/openapi.json", timeout=60).json()

    stop = threading.Event()

    pruned = [0]
    # which execution runs now: stateless cases are answered before the next is sent, so a collection they
    # created can go at once; a stateful sequence reads back what it created, so its collections get a minute
    stateful_now = [False]

    def reseed() -> None:  # a stateful sequence may delete the seeded collections; put them back
        while not stop.wait(reseed_every_s):
            try:
                if prune_old:
                    pruned[0] += prune(url, older_than_s=STATEFUL_KEEP_S if stateful_now[0] else 0.0)
                seeded.update(seed(url))
            except Exception:  # noqa: BLE001 - the fuzz is free to break the scratch data; retry next round
                pass

    keeper = threading.Thread(target=reseed, daemon=True, name="fuzz-reseed")
    keeper.start()
    started = time.monotonic()
    phases: dict[str, Counter] = defaultdict(Counter)  # phase -> scenarios, requests
    statuses: dict[str, Counter] = defaultdict(Counter)  # operation -> status code -> responses
    failures: dict[tuple[str, str, str], dict[str, Any]] = {}
    errors: list[str] = []
    server_codes: Counter = Counter()  # "503 cluster_full" -> responses
    stop_reason = None
    try:
        for phase_names, budget in rounds(seconds, stateful_share):
            stateful_now[0] = "stateful" in phase_names
            schema = build_schema(fuzz_document(served), seeded=seeded, config=engine_config(url, budget, workers))
            schema.config.phases.update(phases=phase_names)
            stop_reason = _execute(from_schema(schema), events, phases, statuses, failures, errors, server_codes) or stop_reason
    finally:
        stop.set()
        keeper.join(timeout=60)
    elapsed = time.monotonic() - started
    codes = Counter()
    for per_operation in statuses.values():
        codes.update(per_operation)
    listed = list(failures.values())
    return {
        "seconds_requested": seconds,
        **({"collections_pruned": pruned[0]} if prune_old else {}),
        "seconds": round(elapsed, 1),
        "stop_reason": stop_reason,
        "requests": sum(c["requests"] for c in phases.values()),
        "phases": {name: dict(counts) for name, counts in sorted(phases.items())},
        "status_codes": {str(code): n for code, n in sorted(codes.items())},
        "server_errors": sum(n for code, n in codes.items() if code >= 500),
        "server_errors_by_code": dict(sorted(server_codes.items())),
        "undocumented_status_codes": sum(f["count"] for f in listed if f["check"] == "status_code_conformance"),
        "failures": listed,
        "errors": errors,
        "operations": {op: {str(code): n for code, n in sorted(counts.items())} for op, counts in sorted(statuses.items())},
    }


def _error_code(response: Any) -> str:
    try:
        return str(json.loads(response.content)["error"]["code"])
    except (ValueError, KeyError, TypeError):
        return "(no JSON error body)"


def _execute(engine: Any, events: Any, phases: dict[str, Counter], statuses: dict[str, Counter],
             failures: dict[tuple[str, str, str], dict[str, Any]], errors: list[str], server_codes: Counter) -> str | None:
    """Run one schemathesis execution, adding what it sent, saw and failed to the counters; its stop reason."""
    stop_reason = None
    for event in engine.execute():
        if isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
            phase = event.phase.value if isinstance(event, events.ScenarioFinished) else "fuzzing"
            recorder = event.recorder
            phases[phase]["scenarios"] += 1
            for case_id, interaction in recorder.interactions.items():
                case = recorder.cases[case_id].value
                phases[phase]["requests"] += 1
                if interaction.response is not None:
                    status = interaction.response.status_code
                    statuses[f"{case.operation.method.upper()} {case.operation.path}"][status] += 1
                    if status >= 500:  # which 5xx: a documented 503 (cluster_full, ...) or a crash
                        server_codes[f"{status} {_error_code(interaction.response)}"] += 1
            for checks in recorder.checks.values():
                for check in checks:
                    if check.failure_info is None:
                        continue
                    failure = check.failure_info.failure
                    key = (check.name, failure.operation or recorder.label, failure.title)
                    entry = failures.setdefault(key, {
                        "check": check.name, "operation": key[1], "title": failure.title,
                        "message": str(failure.message)[:2000], "phase": phase, "count": 0,
                        # the last steps of the sequence, each cut short (a media body is ~100 kB)
                        "reproduce": [_cut(step.curl) for step in check.failure_info.steps][-5:]
                                     or [_cut(check.failure_info.code_sample)],
                    })
                    entry["count"] += 1
        elif isinstance(event, events.NonFatalError):
            errors.append(f"{event.label}: {event.info.title}: {event.info.message}"[:2000])
        elif isinstance(event, events.FatalError):
            errors.append(f"fatal: {event.exception!r}"[:2000])
        elif isinstance(event, events.EngineFinished):
            stop_reason = event.stop_reason.value
    return stop_reason


def _cut(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text) - limit} more characters)"


def _commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parents[1], check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main(argv: list[str] | None = None) -> dict[str, Any]:
    results = Path(__file__).resolve().parents[1] / "results"
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1, help="schemathesis workers (concurrent requests)")
    parser.add_argument("--stateful-share", type=float, default=0.0,
                        help="give the stateful phase this share of the time in an execution of its own (e.g. 0.4)")
    parser.add_argument("--cluster", action="store_true", help="against cluster mode (PostgreSQL + Ray), not embedded")
    parser.add_argument("--out", type=Path, help="default: bench/results/fuzz.json (fuzz_cluster.json with --cluster)")
    args = parser.parse_args(argv)
    args.out = args.out or results / ("fuzz_cluster.json" if args.cluster else "fuzz.json")

    import schemathesis

    from tests.live_server import live_server

    with tempfile.TemporaryDirectory(prefix="recall-fuzz-") as tmp:
        settings = service_settings(Path(tmp) / "data")
        with cluster_service(Path(tmp)) if args.cluster else live_server(settings) as url:
            seeded = seed(url)
            result = run_fuzz(url, args.minutes * 60, seeded, workers=args.workers, stateful_share=args.stateful_share,
                              prune_old=args.cluster)
    mode = ("cluster (recall serve on a PostgreSQL catalog, 2 Ray index shard actors)" if args.cluster
            else "embedded (SQLite catalog, in-process indices)")
    result = {
        "what": f"schemathesis (examples, coverage, fuzzing, stateful in cycles) against the {mode.split(' ')[0]} service",
        "command": "python -m bench.reliability.fuzz " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": _commit(),
        "service": {"mode": mode, "encoders": settings.encoders.model_dump(),
                    "limits": {"max_upload_bytes": MAX_UPLOAD_BYTES, "sync_ingest_files": SYNC_INGEST_FILES},
                    "seeded": ["fz-audio (3 clips)", "fz-image (1 image)", "fz-scratch (empty, for DELETE)"]},
        "minutes_requested": args.minutes,
        **result,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "platform": platform.platform(),
                    "schemathesis": schemathesis.__version__},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("seconds", "requests", "phases", "server_errors", "undocumented_status_codes")}))
    for failure in result["failures"]:
        print(f"FAILED {failure['check']} {failure['operation']}: {failure['title']}\n  {failure['reproduce'][-1:]}")
    return result


if __name__ == "__main__":
    outcome = main()
    sys.exit(1 if outcome["failures"] or outcome["server_errors"] else 0)
