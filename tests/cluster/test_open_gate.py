"""app/usecases/open_gate.py: one opener per collection, other collections never wait, a rejoin waits for all."""

from __future__ import annotations

import threading
import time

from app.usecases.open_gate import OpenGate


def _hold(gate: OpenGate, name: str, seconds: float) -> tuple[threading.Thread, threading.Event]:
    held = threading.Event()

    def run() -> None:
        with gate.collection(name, None) as admitted:
            assert admitted
            held.set()
            time.sleep(seconds)

    thread = threading.Thread(target=run)
    thread.start()
    assert held.wait(5)
    return thread, held


def test_one_opener_per_collection_and_others_pass():
    gate = OpenGate()
    opener, _ = _hold(gate, "a", 0.6)
    started = time.monotonic()
    with gate.collection("a", 0.1) as admitted:  # the same collection: times out
        assert not admitted
    assert 0.09 <= time.monotonic() - started < 0.5
    started = time.monotonic()
    with gate.collection("b", 0.1) as admitted:  # another one: at once
        assert admitted
    assert time.monotonic() - started < 0.05
    with gate.collection("a", None) as admitted:  # no timeout: waits for the opener
        assert admitted
    opener.join()
    assert gate._locks == {} and gate._inside == 0  # nothing kept for names nobody holds


def test_exclusive_waits_for_openings_under_way_and_keeps_new_ones_out():
    gate = OpenGate()
    order: list[str] = []
    opener, _ = _hold(gate, "a", 0.4)

    def rejoin() -> None:
        with gate.exclusive():
            order.append("rejoin start")
            time.sleep(0.4)
            order.append("rejoin end")

    rejoiner = threading.Thread(target=rejoin)
    rejoiner.start()
    time.sleep(0.1)
    assert order == []  # the opening of "a" is still under way
    opener.join()
    time.sleep(0.1)
    assert order == ["rejoin start"]
    with gate.collection("b", 0.05) as admitted:  # the gate is closed: a request gives up after its wait
        assert not admitted
    with gate.collection("b", None) as admitted:  # a patient one gets in once the rejoin is done
        assert admitted
        assert order == ["rejoin start", "rejoin end"]
    rejoiner.join()
    assert gate._locks == {} and gate._inside == 0


def test_a_timed_out_waiter_leaves_the_lock_to_the_next():
    gate = OpenGate()
    opener, _ = _hold(gate, "a", 0.3)
    with gate.collection("a", 0.05) as admitted:
        assert not admitted
    opener.join()
    with gate.collection("a", 0.05) as admitted:
        assert admitted
