"""FasterPath: of two interchangeable ways, the one with the lower recent time runs, the other now and then."""

from app.encoders.faster_path import FasterPath


class FakeClock:
    """A clock each way advances by its own cost, which the test changes to mimic the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _runner(clock: FakeClock, costs: list[float], taken: list[int]):
    def way(i: int):
        def call() -> str:
            clock.now += costs[i]
            taken.append(i)
            return f"way {i}"
        return call
    return way(0), way(1)


def test_each_way_is_tried_then_the_faster_runs_and_the_other_is_probed_every_explore_calls() -> None:
    clock, taken, costs = FakeClock(), [], [0.004, 0.003]
    path = FasterPath(explore=8, clock=clock)
    first, second = _runner(clock, costs, taken)
    results = [path.run(first, second) for _ in range(40)]
    assert taken[:2] == [0, 1]  # each way once
    assert results[0] == "way 0" and results[1] == "way 1"  # the chosen way's own result
    assert taken[2:].count(0) == len([c for c in range(3, 41) if c % 8 == 0])  # only the probes take the slower way
    assert all(taken[c - 1] == 0 for c in range(3, 41) if c % 8 == 0)


def test_a_change_in_load_moves_the_choice_within_a_few_probes() -> None:
    clock, taken, costs = FakeClock(), [], [0.004, 0.003]  # quiet: two threads (way 1) faster
    path = FasterPath(explore=4, weight=0.5, clock=clock)
    first, second = _runner(clock, costs, taken)
    for _ in range(20):
        path.run(first, second)
    assert taken[-3:] == [1, 1, 1] or taken[-4:].count(1) >= 3
    costs[1] = 0.008  # a background job holds the other core: two threads now slower
    for _ in range(20):
        path.run(first, second)
    assert taken[-4:].count(0) >= 3  # back to one thread, the other way only probed
    costs[1] = 0.003  # quiet again: the probes notice
    for _ in range(40):
        path.run(first, second)
    assert taken[-4:].count(1) >= 3


def test_a_failed_call_records_nothing() -> None:
    clock = FakeClock()
    path = FasterPath(clock=clock)

    def boom() -> None:
        clock.now += 1.0
        raise RuntimeError("boom")

    try:
        path.run(boom, boom)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the call's error must reach the caller")
    assert path.average == [None, None]  # way 0 is tried again next time, not judged by a failure
