"""Does every index shard hold exactly what the catalog says it should?

:func:`check_shards` brings every shard of a collection to the catalog's latest sequence, then
compares, shard by shard and index kind by kind, the segment ids and vectors the shard holds with
the catalog's rows of that shard's partition (``shard_key % count == number``): rows the shard
lacks (``missing``), rows it holds that the catalog does not have there (``extra``: deleted,
replaced, or of another partition) and rows whose vector differs (``wrong_vectors``). An empty
list means the shards agree with the catalog. Used by the fault tests (tests/cluster/) and the
restart bench (bench/cluster/shard_restart.py).

Run it when writes have paused: it reads the catalog's sequence before and after, and looks again
(up to ``attempts`` times) if a write landed in between, since a write in flight would otherwise be
reported as a difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXAMPLES = 10  # ids listed per kind of difference; the counts are complete


class CatalogMoving(RuntimeError):
    """Writes kept landing while the shards were compared; check again once they pause."""


def check_shards(catalog: Any, index: Any, attempts: int = 3) -> list[dict[str, Any]]:
    """Differences between the shards of ``index`` (a RemoteCollectionIndex) and ``catalog``; [] when none."""
    collection = index.collection
    for _ in range(attempts):
        target = catalog.last_seq(collection.name)
        held = {kind: index._call("contents", kind, target, strict=True) for kind, _ in index.indices()}
        expected = [_partition(catalog, collection, number, len(index.actors)) for number in range(len(index.actors))]
        if catalog.last_seq(collection.name) != target:
            continue
        differences = []
        for kind, shards in held.items():
            for number, (applied, ids, vectors) in enumerate(shards):
                want_ids, want_floats, want_codes = expected[number]
                found = _compare(ids, vectors, want_ids, want_codes if kind == "binary" else want_floats, kind == "binary")
                if found:
                    differences.append({"shard": number + 1, "shards": len(index.actors), "kind": kind,
                                        "applied_seq": int(applied), "catalog_seq": target, **found})
        return differences
    raise CatalogMoving(f"collection {collection.name!r} changed during each of {attempts} comparisons")


def _partition(catalog: Any, collection: Any, number: int, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ids, floats, codes) of the catalog's rows of one shard, ids ascending."""
    parts = list(catalog.iter_segments(collection.name, collection.dim, collection.bits, shard=(number, count)))
    if not parts:
        return (np.zeros(0, np.int64), np.zeros((0, collection.dim), np.float32),
                np.zeros((0, collection.bits // 8), np.uint8))
    return tuple(np.concatenate([p[n] for p in parts]) for n in range(3))  # type: ignore[return-value]


def _compare(ids: np.ndarray, vectors: np.ndarray, want_ids: np.ndarray, want_vectors: np.ndarray,
             exact: bool) -> dict[str, Any]:
    """Missing, extra and wrong-vector ids (counts and the first few of each); {} when equal."""
    ids = np.asarray(ids, np.int64)
    missing = np.setdiff1d(want_ids, ids)
    extra = np.setdiff1d(ids, want_ids)
    common, mine, theirs = np.intersect1d(ids, want_ids, return_indices=True)
    a, b = np.asarray(vectors)[mine], np.asarray(want_vectors)[theirs]
    same = (a == b).all(axis=1) if exact else np.isclose(a, b, rtol=0, atol=1e-6).all(axis=1)
    wrong = common[~same] if len(common) else common
    if not (len(missing) or len(extra) or len(wrong)):
        return {}
    return {"missing": int(len(missing)), "extra": int(len(extra)), "wrong_vectors": int(len(wrong)),
            "examples": {"missing": missing[:EXAMPLES].tolist(), "extra": extra[:EXAMPLES].tolist(),
                         "wrong_vectors": wrong[:EXAMPLES].tolist()}}
