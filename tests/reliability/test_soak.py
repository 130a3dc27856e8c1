"""A short soak: 16 clients of mixed writes, deletes, searches and jobs against the real service
(a uvicorn process on loopback); the service ends holding exactly what the clients' model says.

Correctness only (bench/cluster/soak.py measures the long run and writes bench/results/soak.json): every
acknowledged write present with its last version, every acknowledged delete absent, the index's
segment count equal to the catalog's, no 5xx, no unexpected status, no file descriptor left open.
"""

from __future__ import annotations

import json

import pytest

from bench.cluster.soak import run_soak

pytestmark = pytest.mark.slow


def test_a_short_mixed_load_leaves_exactly_the_acknowledged_state(tmp_path):
    out = tmp_path / "soak.json"
    result = run_soak(clients=16, seconds=15, max_requests=300, out=out)
    assert json.loads(out.read_text())["final"] == result["final"]
    assert result["server_errors"] == 0, result["statuses"]
    assert result["unexpected"] == [], result["unexpected"]
    final = result["final"]
    assert final["matches_model"], final
    assert final["index_matches_catalog"], final
    assert final["uncertain"] == 0
    # the run really mixed its operations, and the model holds writes that survived deletes
    assert {"ingest", "upsert", "delete", "search", "job", "job_poll"} <= set(result["statuses"])
    assert result["statuses"]["delete"].get("204", 0) > 0 and final["model_items"] > 0
    # descriptors: every client has disconnected; a leak per request would show as hundreds here
    assert result["resources"]["open_fds"]["growth"] <= 16, result["resources"]["open_fds"]


def test_the_comparison_catches_every_kind_of_divergence():
    """The model check itself: a lost write, a write nobody made, an old version, a deleted item back."""
    from bench.cluster.soak import Run, compare

    run = Run(deadline=0, max_requests=0)
    run.deleted = {"gone"}
    stats = {"segments": 4, "indexed_segments": 4, "items": 4}
    model = {"a": 2, "b": 1, "c": 1}
    assert compare(model, {"a": {"v": 2}, "b": {"v": 1}, "c": {"v": 1}}, {**stats, "items": 3}, run)["matches_model"]
    result = compare(model, {"a": {"v": 1}, "c": {"v": 1}, "x": {"v": 1}, "gone": {"v": 1}}, stats, run)
    assert not result["matches_model"]
    assert (result["missing"], result["extra"], result["stale"], result["deleted_but_present"]) == (["b"], ["gone", "x"], ["a"], ["gone"])
    assert not compare(model, {"a": {"v": 2}, "b": {"v": 1}, "c": {"v": 1}}, {**stats, "indexed_segments": 3}, run)["index_matches_catalog"]
