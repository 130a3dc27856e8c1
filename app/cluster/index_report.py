"""Which index answers a sharded collection: the shards' own reports merged into one.

Each shard actor trains and swaps its own IVF (app/cluster/shard_actor.py), so for a while after
a collection crosses its threshold some shards answer from their IVF and others still from flat.
GET /v1/collections/{name} then says ``answering: "mixed"`` and lists every shard; when all agree
it says their common kind, as a single-process collection does, and still lists them. A shard
that did not answer is listed with ``answering: null`` and ``unavailable: true``.
"""

from __future__ import annotations

from typing import Any

from app.index.kinds import IndexSpec

_PER_SHARD = ("answering", "building", "nlist", "nprobe", "trains_at", "trained_on", "last_build_s", "last_error", "recall")


def merge_recall(measured: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One collection figure from the shards' live recall (each shard samples and measures its own IVF).

    The query-weighted mean of the shards' recall@10. A merged top 10 takes each shard's best, so a shard's miss
    costs the merged answer only where the missed window would have made the global top 10: the mean is the
    pessimistic side of the collection's recall, never above what each shard measured.
    """
    scored = [m for m in measured if m.get("recall_at_10") is not None and m.get("queries")]
    if not scored:
        return None
    queries = sum(m["queries"] for m in scored)
    nprobes = sorted({n for m in scored for n in (m.get("nprobes") or [])}) or None
    return {
        "recall_at_10": sum(m["recall_at_10"] * m["queries"] for m in scored) / queries,
        "queries": queries,
        "skipped": sum(m.get("skipped") or 0 for m in scored),
        "nprobes": nprobes,
        "measured_at": min(m["measured_at"] for m in scored),  # the oldest shard's measurement
        "busy_s": sum(m.get("busy_s") or 0.0 for m in scored),
        "seconds": max(m.get("seconds") or 0.0 for m in scored),
        "sampling": f"each of {len(scored)} shards samples its own IVF-answered queries; merged as the "
                    "query-weighted mean of the shards' figures",
    }


def _common(values: list[Any]) -> Any:
    """The value every shard has, or None when they differ (or none answered)."""
    return values[0] if values and all(v == values[0] for v in values) else None


def merge_shard_indices(spec: IndexSpec, stats: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The collection's ``index`` block from each shard's ``stats()`` (None for a shard that missed).

    ``trains_at`` counts one shard's windows (index.auto_ivf_windows applies per partition);
    ``trained_on`` is the sum over shards when every shard has an IVF.
    """
    shards: list[dict[str, Any]] = []
    found: list[dict[str, Any]] = []
    for number, stat in enumerate(stats):
        if stat is None:
            shards.append({"shard": number + 1, "answering": None, "unavailable": True})
            continue
        described = stat.get("index")
        if described is None:  # a float-only collection in memory: no binary index to describe
            return None
        found.append(described)
        entry = {"shard": number + 1, "windows": stat["segments"]}
        entry.update({key: described.get(key) for key in _PER_SHARD if key in described})
        shards.append(entry)
    answering = [d.get("answering") for d in found]
    trained = [d.get("trained_on") for d in found]
    builds = [d["last_build_s"] for d in found if d.get("last_build_s") is not None]
    out: dict[str, Any] = {
        "kind": spec.kind,
        "answering": None if not found else (_common(answering) if len(set(answering)) == 1 else "mixed"),
        "building": any(d.get("building") for d in found),
        "nlist": _common([d.get("nlist") for d in found]),
        "nprobe": _common([d.get("nprobe") for d in found]),
        "trains_at": _common([d.get("trains_at") for d in found]),
        "trained_on": sum(trained) if found and all(t is not None for t in trained) else None,
        "last_build_s": max(builds) if builds else None,
        "recall": merge_recall([d["recall"] for d in found if d.get("recall")]),
        "floats": spec.floats,
        "shards": shards,
    }
    errors = [f"shard {s['shard']}: {s['last_error']}" for s in shards if s.get("last_error")]
    if errors:
        out["last_error"] = "; ".join(errors)
    files = [d["float_file_bytes"] for d in found if d.get("float_file_bytes") is not None]
    if files:
        out["float_file_bytes"] = sum(files)
    return out
