"""BinaryIVF searches one query on one OpenMP thread (FAISS' idle team spins on a busy machine: scale.json),
a batch on the caller's team, and leaves the caller's team size as it found it; answers are the same."""

from __future__ import annotations

import threading

import faiss
import numpy as np

from app.index import BinaryIVF
from bench.index.index_kinds import clustered_codes


class _Spy:
    """The FAISS index, recording the calling thread's OpenMP team size at each search."""

    def __init__(self, index) -> None:
        self._index, self.teams = index, []

    def search(self, *args, **kwargs):
        self.teams.append(faiss.omp_get_max_threads())
        return self._index.search(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._index, name)


def test_one_query_runs_on_one_thread_a_batch_on_the_team_and_answers_agree():
    codes, queries = clustered_codes(4_000, 128, 16, seed=5)
    ivf = BinaryIVF.train(codes, 16)
    ivf.add(np.arange(len(codes), dtype=np.int64), codes)
    batch = ivf.search(queries[:8], 10, nprobe=4)
    spy = _Spy(ivf._index)
    ivf._index = spy
    seen: dict[str, object] = {}

    def caller() -> None:  # a thread of its own: the setting is per thread, and pytest's may have one already
        faiss.omp_set_num_threads(2)
        singles = [ivf.search(queries[i : i + 1], 10, nprobe=4) for i in range(8)]
        seen["after"] = faiss.omp_get_max_threads()
        seen["singles"] = singles
        ivf.search(queries[:8], 10, nprobe=4)

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join()
    assert spy.teams == [1] * 8 + [2]  # one query: a team of one; the batch: the caller's team
    assert seen["after"] == 2  # restored
    for i, (d, ids) in enumerate(seen["singles"]):
        assert np.array_equal(d[0], batch[0][i]) and np.array_equal(ids[0], batch[1][i])
