"""run_beside: two independent halves of a model call on two threads, errors never leaving work behind."""

import os
import threading
import time

import pytest

from app.encoders.side_thread import run_beside


def test_both_results_come_back_and_the_second_ran_on_the_side_thread():
    here_thread = threading.current_thread().name
    first, second = run_beside(lambda: ("here", threading.current_thread().name),
                               lambda: ("beside", threading.current_thread().name))
    assert first == ("here", here_thread)
    assert second[0] == "beside" and second[1].startswith("model-side") and second[1] != here_thread


def test_the_halves_overlap_in_time():
    started = threading.Event()

    def beside():
        started.set()
        time.sleep(0.2)
        return "done"

    # "here" waits for "beside" to have started: only possible if they run at the same time
    first, second = run_beside(lambda: started.wait(5), beside)
    assert first is True and second == "done"


def test_an_error_here_waits_for_the_side_work_before_it_propagates():
    finished = threading.Event()

    def beside():
        time.sleep(0.2)
        finished.set()

    def here():
        raise ValueError("bad batch")

    with pytest.raises(ValueError, match="bad batch"):
        run_beside(here, beside)
    assert finished.is_set()  # nothing still running that reads the failed batch's inputs


def test_an_error_beside_propagates():
    def beside():
        raise RuntimeError("side failed")

    with pytest.raises(RuntimeError, match="side failed"):
        run_beside(lambda: 1, beside)


def test_general_audio_gives_the_same_embeddings_with_and_without_the_side_thread(two_cores, monkeypatch):
    import numpy as np

    from app.encoders.audio import routed_fusion
    from app.encoders.registry import discover

    encoder = discover()["general-audio"].factory()
    assert isinstance(encoder, routed_fusion.RoutedFusionEncoder)
    rng = np.random.default_rng(3)
    windows = [rng.standard_normal(16000).astype(np.float32) * 0.1 for _ in range(2)]
    calls = []
    monkeypatch.setattr(routed_fusion, "run_beside", lambda here, beside: _count(calls, here, beside))
    beside = encoder.encode(windows)
    assert calls, "two windows should take the side thread"
    monkeypatch.setattr(routed_fusion, "SIDE_THREAD_MAX_WINDOWS", 0)
    calls.clear()
    alone = encoder.encode(windows)
    assert not calls
    np.testing.assert_array_equal(beside.floats, alone.floats)
    np.testing.assert_array_equal(beside.codes, alone.codes)


def _count(calls, here, beside):
    calls.append(1)
    return run_beside(here, beside)


@pytest.fixture
def two_cores(monkeypatch):
    """A process allowed two CPUs, whatever the test machine has, with no thread budget configured."""
    from app.encoders import side_thread

    monkeypatch.setattr(side_thread, "_usable", 2.0)
    monkeypatch.setattr(side_thread, "_model_threads", None)


def test_the_second_core_is_spare_only_while_at_most_one_request_is_in_flight(two_cores):
    from app.encoders.side_thread import in_flight, spare_core

    assert spare_core()
    with in_flight():
        assert spare_core()  # the lone request itself
        with in_flight():
            assert not spare_core()  # another request's work needs the other core
        assert spare_core()
    with pytest.raises(RuntimeError):
        with in_flight():
            raise RuntimeError("a failed request still leaves the count")
    assert spare_core()


def test_general_audio_keeps_to_one_thread_while_other_requests_are_in_flight(two_cores, monkeypatch):
    import numpy as np

    from app.encoders.audio import routed_fusion
    from app.encoders.registry import discover
    from app.encoders.side_thread import in_flight

    encoder = discover()["general-audio"].factory()
    calls = []
    monkeypatch.setattr(routed_fusion, "run_beside", lambda here, beside: _count(calls, here, beside))
    window = [np.zeros(16000, np.float32)]
    with in_flight(), in_flight():
        encoder.encode(window)
    assert not calls
    with in_flight():
        encoder.encode(window)
    assert calls


def test_no_second_core_without_two_usable_cpus_or_a_budget_of_two_threads(two_cores, monkeypatch):
    from app.encoders import side_thread

    assert side_thread.spare_core()
    side_thread.set_model_threads(1)  # the operator's torch_threads = 1
    assert not side_thread.spare_core()
    side_thread.set_model_threads(2)
    assert side_thread.spare_core()
    monkeypatch.setattr(side_thread, "_usable", 1.5)  # e.g. a container started with --cpus 1.5
    assert not side_thread.spare_core()


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "max 100000\n"}, None),  # cgroup v2, no quota
    ({"cpu.max": "150000 100000\n"}, 1.5),  # cgroup v2, --cpus 1.5
    ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no quota
    ({"cpu/cpu.cfs_quota_us": "50000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.5),  # v1, half a CPU
    ({}, None),  # no cgroup files at all
    ({"cpu.max": "garbage"}, None),
])
def test_the_cgroup_cpu_quota_is_read_from_v2_or_v1_files(tmp_path, files, quota):
    from app.encoders.side_thread import cgroup_cpu_quota, usable_cores

    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup_cpu_quota(tmp_path) == quota
    cores = usable_cores(tmp_path)
    assert 0 < cores <= len(os.sched_getaffinity(0)) and (quota is None or cores <= quota)


def test_map_beside_returns_every_result_in_order_and_uses_both_threads():
    from app.encoders.side_thread import map_beside

    threads = set()

    def work(x):
        threads.add(threading.current_thread().name)
        time.sleep(0.01)  # long enough that the side thread gets some of the items
        return x * x

    assert map_beside(work, list(range(20))) == [x * x for x in range(20)]
    assert len(threads) == 2
    assert map_beside(work, []) == []


def test_map_beside_raises_an_error_after_both_threads_stopped():
    from app.encoders.side_thread import map_beside

    done = []

    def work(x):
        time.sleep(0.01)
        if x == 3:
            raise ValueError("bad item")
        done.append(x)
        return x

    with pytest.raises(ValueError, match="bad item"):
        map_beside(work, list(range(10)))
    settled = len(done)
    time.sleep(0.05)
    assert len(done) == settled  # nothing still running after the call returned
