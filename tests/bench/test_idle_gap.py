"""bench.latency.idle_gap's schedule: the gaps take turns block by block, each block's first queries uncounted."""

from __future__ import annotations

import pytest

from bench.latency.idle_gap import WARMUP, schedule


def test_gaps_take_turns_by_block_and_each_blocks_first_queries_are_not_counted() -> None:
    block = WARMUP + 5
    plan = schedule(4 * block + 3, [0.0, 0.002], block)
    assert [gap for gap, _ in plan] == ([0.0] * block + [0.002] * block) * 2 + [0.0] * 3
    counted = [i for i, (_, c) in enumerate(plan) if c]
    assert counted == [b * block + j for b in range(4) for j in range(WARMUP, block)]
    # every gap gets the same number of counted queries over whole blocks
    assert sum(c for g, c in plan if g == 0.0) == sum(c for g, c in plan if g == 0.002) == 10


def test_a_block_no_longer_than_its_warm_up_is_refused() -> None:
    with pytest.raises(ValueError, match="longer than"):
        schedule(100, [0.0], WARMUP)
