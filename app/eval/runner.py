"""Run a query manifest against the service's HTTP search API and collect ranked results.

Manifest: a CSV with a ``qid`` column and one of ``path`` (a media file, sent as multipart,
relative paths resolve against the manifest's folder), ``item_id`` (query by an indexed item)
or ``text`` (text query). A row may fill exactly one of the three.

API: ``POST {url}/v1/collections/{collection}/search``; response
``{"results": [{"id", "rank", "score", "distance", "metadata", "segments": [{"start", "end",
"distance"}]}], "timings": {...}}``; the key goes in the ``X-API-Key`` header.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from app.eval.metrics import Segment

QUERY_KINDS = ("path", "item_id", "text")


@dataclass(frozen=True)
class ManifestQuery:
    """One query of a manifest: its id, its kind (path, item_id or text) and the value."""

    qid: str
    kind: str
    value: str


def read_manifest(path: str | Path) -> list[ManifestQuery]:
    """Parse a query manifest; relative ``path`` values become absolute against its folder.

    Raises:
        ValueError: no ``qid`` column, a duplicate qid, or a row with zero or several query fields.
    """
    path = Path(path)
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or "qid" not in reader.fieldnames:
            raise ValueError(f"{path}: manifest needs a 'qid' column")
        queries: list[ManifestQuery] = []
        seen: set[str] = set()
        for lineno, row in enumerate(reader, start=2):
            filled = [kind for kind in QUERY_KINDS if (row.get(kind) or "").strip()]
            if len(filled) != 1:
                raise ValueError(f"{path}:{lineno}: fill exactly one of {', '.join(QUERY_KINDS)}")
            qid = row["qid"].strip()
            if not qid or qid in seen:
                raise ValueError(f"{path}:{lineno}: empty or duplicate qid {qid!r}")
            seen.add(qid)
            kind = filled[0]
            value = row[kind].strip()
            if kind == "path" and not Path(value).is_absolute():
                value = str((path.parent / value).resolve())
            queries.append(ManifestQuery(qid, kind, value))
    return queries


def search(client: httpx.Client, collection: str, query: ManifestQuery, k: int, mode: str | None,
           item_distance: str | None = None) -> dict[str, Any]:
    """Send one query; returns the decoded JSON response. ``mode`` and ``item_distance`` are passed
    through when given (else the service's defaults).

    Raises:
        RuntimeError: a non-2xx answer, with the service's error message.
    """
    url = f"/v1/collections/{collection}/search"
    options = {name: value for name, value in (("mode", mode), ("item_distance", item_distance)) if value}
    if query.kind == "path":
        data = {"k": str(k)} | options
        with open(query.value, "rb") as handle:
            response = client.post(url, files={"file": (Path(query.value).name, handle.read())}, data=data)
    else:
        body: dict[str, Any] = {query.kind: query.value, "k": k} | options
        response = client.post(url, json=body)
    if response.status_code >= 300:
        raise RuntimeError(f"query {query.qid}: HTTP {response.status_code}: {response.text[:500]}")
    return response.json()


def result_score(result: dict[str, Any]) -> float:
    """A higher-is-better score: the result's ``score``, else minus its ``distance``."""
    if result.get("score") is not None:
        return float(result["score"])
    if result.get("distance") is not None:
        return -float(result["distance"])
    raise ValueError(f"result {result.get('id')!r} has neither score nor distance")


def run_manifest(
    client: httpx.Client,
    collection: str,
    queries: list[ManifestQuery],
    k: int = 10,
    mode: str | None = None,
    item_distance: str | None = None,
) -> tuple[dict[str, list[tuple[str, float]]], dict[str, list[tuple[Segment, float]]]]:
    """Run every query and collect (ranked documents, ranked segments) per qid.

    Documents keep the service's order (by ``rank`` when given). Segments of all results are
    pooled per query and ordered by distance, closest first, with score = -distance.
    """
    rankings: dict[str, list[tuple[str, float]]] = {}
    segments: dict[str, list[tuple[Segment, float]]] = {}
    for query in queries:
        results = search(client, collection, query, k, mode, item_distance).get("results", [])
        results = sorted(results, key=lambda r: r.get("rank", 0))
        rankings[query.qid] = [(str(r["id"]), result_score(r)) for r in results]
        spans = [
            ((str(r["id"]), float(s["start"]), float(s["end"])), -float(s["distance"]))
            for r in results
            for s in r.get("segments") or []
        ]
        if spans:
            segments[query.qid] = sorted(spans, key=lambda item: -item[1])
    return rankings, segments
