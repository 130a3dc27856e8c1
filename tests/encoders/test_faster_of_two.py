"""Choosing the faster of two equivalent ways by their recent times (app/encoders/faster_of_two.py)."""

from __future__ import annotations

import pytest

from app.encoders.faster_of_two import FasterOfTwo


def run(chooser: FasterOfTwo, cost: dict[int, float], calls: int) -> list[int]:
    ways = []
    for _ in range(calls):
        way = chooser.choose()
        chooser.record(way, cost[way])
        ways.append(way)
    return ways


def test_each_way_runs_once_then_the_faster_runs_and_the_other_every_explore_th_call() -> None:
    chooser = FasterOfTwo(explore=4)
    ways = run(chooser, {0: 5.0, 1: 3.0}, 12)
    assert ways[:2] == [0, 1]
    assert ways[2:] == [1, 0, 1, 1, 1, 0, 1, 1, 1, 0]  # calls 4, 8 and 12 try the slower way


def test_a_change_of_load_turns_the_choice_within_a_few_explorations() -> None:
    chooser = FasterOfTwo(explore=4, weight=0.5)
    run(chooser, {0: 5.0, 1: 3.0}, 20)  # both cores free: way 1 wins
    later = run(chooser, {0: 5.0, 1: 9.0}, 20)  # another process takes a core: way 1 now loses
    assert later[-8:] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert chooser.average[1] > chooser.average[0]


def test_timed_records_the_chosen_way() -> None:
    chooser = FasterOfTwo()
    with chooser.timed() as way:
        assert way == 0
    assert chooser.average[0] is not None and chooser.average[0] >= 0 and chooser.average[1] is None
    with pytest.raises(RuntimeError), chooser.timed() as way:  # a failed call records nothing
        assert way == 1
        raise RuntimeError("boom")
    assert chooser.average[1] is None


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        FasterOfTwo(explore=1)
    with pytest.raises(ValueError):
        FasterOfTwo(weight=0.0)
