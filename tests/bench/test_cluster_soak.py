"""bench/cluster/cluster_soak.py in miniature: its whole machinery for a few seconds per arm, one shard kill and a
PostgreSQL fast restart, on a real PostgreSQL, Ray head and `recall serve`; never its timings.

It checks the JSON's shape, that the faults were injected and closed with a recovery, that nothing acknowledged
was lost and the shards agree with the catalog, and that the lost-writes accounting would see a loss: an id
added to the acknowledged list that was never written is reported lost, and the target fails.
"""

from __future__ import annotations

import json
import multiprocessing

import pytest

from bench.cluster._soak_clients import Answer, close_windows, in_window
from tests.cluster.pg_server import available
from tests.cluster.ray_head import RAY
from tests.system_deps import require_system

pytestmark = pytest.mark.slow
PLANTED = "never-written"


def _plant_a_lost_write(loads) -> None:
    loads["faults"].acknowledged.append(PLANTED)


def _short_soak(out) -> None:
    from bench.cluster.cluster_soak import run

    run(minutes=0.1, clients=4, kills=1, down_s=0.5, search_sample=4, out=out, tamper=_plant_a_lost_write)


def test_fault_windows_run_from_the_fault_to_the_first_successes_after_it_plus_the_margin():
    answers = [Answer("search", 9.0, 12.0, 200, None, None),  # sent before the fault's back: not its recovery
               Answer("search", 10.5, 11.0, 200, None, None), Answer("ingest", 10.1, 10.2, 503, "2", "catalog_unavailable"),
               Answer("ingest", 10.6, 11.5, 200, None, None), Answer("search", 20.0, 20.1, 200, None, None)]
    faults = [{"start": 8.0, "back": 10.0}]
    close_windows(faults, answers, arm_end=30.0, margin_s=2.0)
    assert faults[0]["end"] == 13.5 and faults[0]["recovery_s"] == {"search": 1.0, "ingest": 1.5}
    assert [in_window(a, faults) for a in answers] == [True, True, True, True, False]
    never = [{"start": 25.0, "back": 26.0}]  # no success after it: the window lasts to the arm's end
    close_windows(never, answers, arm_end=30.0, margin_s=2.0)
    assert never[0]["end"] == 30.0 and never[0]["recovery_s"]["search"] is None


def test_a_short_soak_writes_its_json_loses_nothing_and_counts_a_lost_write(tmp_path):
    require_system("postgresql")
    if not available() or not RAY.is_file():
        pytest.skip("PostgreSQL binaries or the ray command not usable")
    planted = PLANTED
    out = tmp_path / "cluster_soak.json"
    # in a child process: Ray is process-wide, and this one may already hold the suite's in-process Ray, where
    # the soak's own checks would open shard actors of its catalog instead of on the soak's head
    child = multiprocessing.get_context("spawn").Process(target=_short_soak, args=(out,))
    child.start()
    child.join(timeout=900)
    assert child.exitcode == 0
    result = json.loads(out.read_text())
    assert set(result) >= {"what", "command", "config", "arms", "targets", "machine", "date"}
    free, faulty = result["arms"]["fault_free"], result["arms"]["faults"]
    for arm in (free, faulty):
        for op in ("search", "ingest"):
            assert arm[op]["outside_windows"]["n"] + sum(arm[op]["statuses_inside_windows"].values()) >= 1
        assert arm["memory"]["api_rss_mb"]["max"] > 0 and arm["server_errors_500"] == 0
        # this run's shards only (3 collections x 2), whatever else runs Ray on the machine
        assert arm["memory"]["shards_rss_mb"]["max"] > 0 and max(arm["memory"]["shard_processes"]) <= 6
        assert arm["refusals_all_503_with_retry_after"]
        assert arm["verification"]["shard_checker_differences"] == []
        assert arm["verification"]["index_segments_equal_catalog"]
    assert free["faults"] == [] and free["verification"]["acknowledged_lost"] == 0
    assert [f["kind"] for f in faulty["faults"]] == ["postgres_fast", "shard_kill"]
    assert all(f["window_s"] > 0 for f in faulty["faults"])
    # the planted id is the one loss, and it fails the target
    assert faulty["verification"]["acknowledged_lost"] == 1 and faulty["verification"]["lost_examples"] == [planted]
    assert result["targets"]["acknowledged_lost"] == 1 and not result["targets"]["zero_lost"]
    # the writes really acknowledged are all there: every acknowledged id but the planted one is in the catalog
    check = faulty["verification"]
    assert check["acknowledged_writes"] - 1 <= check["catalog_items"] <= check["acknowledged_writes"] - 1 + check["uncertain_writes"]
