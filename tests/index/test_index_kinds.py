"""Index kinds: the IVF against brute force, deletes and upserts, the background build and swap, snapshots.

Recall is checked on small clustered data with fixed seeds and a margin below what the seeds give;
no test asserts a timing.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.index import AdaptiveBinaryIndex, BinaryIVF, IndexSpec
from app.index import ivf as ivf_module
from app.index.adaptive import ivf_path
from app.index.exact import hamming_distances
from app.index.kinds import IVF_MIN_WINDOWS, auto_nlist, default_nprobe
from bench.index.index_kinds import clustered_codes, tie_tolerant_recall

BITS = 256


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    codes, queries = clustered_codes(20_000, BITS, 60, seed=5)
    ids = np.arange(len(codes), dtype=np.int64) * 2 + 1
    return ids, codes, queries


def exact_top(queries: np.ndarray, codes: np.ndarray, k: int) -> np.ndarray:
    return np.sort(hamming_distances(queries, codes), axis=1)[:, :k]


def test_spec_validation() -> None:
    assert IndexSpec().kind == "auto"
    assert IndexSpec.from_json(IndexSpec("ivf", 64, 8).to_json()) == IndexSpec("ivf", 64, 8)
    for bad in (dict(kind="hnsw"), dict(kind="ivf", nlist=8), dict(kind="ivf", nprobe=0), dict(kind="ivf", nlist=64, nprobe=65),
                dict(kind="flat", nprobe=4), dict(kind="ivf", nlist=True)):
        with pytest.raises(ValueError):
            IndexSpec(**bad)  # type: ignore[arg-type]
    assert IndexSpec("flat").trains_at(10**6) is None
    assert IndexSpec("auto").trains_at(0) is None
    assert IndexSpec("auto").trains_at(2_000_000) == 2_000_000
    assert IndexSpec("ivf").trains_at(0) == IVF_MIN_WINDOWS
    assert IndexSpec("ivf", nlist=1024).trains_at(0) == 39 * 1024


def test_auto_nlist_and_nprobe() -> None:
    # the power of two nearest sqrt(n), at most 2048 (re-sized from bench/results/scale.json: app/index/kinds.py)
    assert auto_nlist(10**5) == 256 and auto_nlist(10**6) == 1024 and auto_nlist(10**7) == 2048
    assert auto_nlist(10) == 16
    for n in (624, 700, 1300, 5000, 40_000):  # never more lists than 39 training codes each
        assert auto_nlist(n) == 16 or 39 * auto_nlist(n) <= n
    assert auto_nlist(10**12) == 2048
    assert default_nprobe(4096, 10**6) == 64 and default_nprobe(1024, 10**5) == 128
    assert default_nprobe(16, 700) == 16 and default_nprobe(4096, 10**8) == 16


def test_ivf_recall_against_brute_force(data) -> None:
    ids, codes, queries = data
    ivf = BinaryIVF.train(codes, nlist=64)
    ivf.add(ids, codes)
    truth = exact_top(queries, codes, 10)
    d, got = ivf.search(queries, 10, nprobe=16)
    # every reported distance is the true distance of that id
    rows = (got - 1) // 2
    assert np.array_equal(d[got >= 0], hamming_distances(queries, codes)[np.nonzero(got >= 0)[0], rows[got >= 0]])
    assert tie_tolerant_recall(truth, d, got) >= 0.85  # these seeds: ~0.95
    d_all, got_all = ivf.search(queries, 10, nprobe=64)  # every list probed: exact
    assert tie_tolerant_recall(truth, d_all, got_all) == 1.0
    assert np.array_equal(d_all, truth)


def test_ivf_deletes_and_upserts_never_return_removed_ids(data) -> None:
    ids, codes, queries = data
    ivf = BinaryIVF.train(codes, nlist=32)
    ivf.add(ids, codes)
    gone = ids[::3]
    assert ivf.remove(gone) == len(gone)
    assert ivf.remove(gone) == 0
    assert len(ivf) == len(ids) - len(gone)
    _, got = ivf.search(queries, 500, nprobe=32)
    assert not np.isin(got, gone).any()
    # upsert: the id comes back with another code, and the search reports the new code's distance
    target = int(ids[1])
    ivf.remove([target])
    ivf.add([target], queries[:1])
    d, got = ivf.search(queries[:1], 1, nprobe=32)
    assert got[0, 0] == target and d[0, 0] == 0


def test_ivf_snapshot_round_trip_and_corruption(data, tmp_path) -> None:
    ids, codes, queries = data
    ivf = BinaryIVF.train(codes, nlist=32)
    ivf.add(ids, codes)
    path = tmp_path / "c.binary.faiss.ivf"
    ivf.save(path, last_seq=42)
    back, seq = BinaryIVF.load(path, BITS)
    assert seq == 42 and len(back) == len(ivf) and back.nprobe == ivf.nprobe and back.trained_on == len(codes)
    assert all(np.array_equal(a, b) for a, b in zip(back.search(queries, 10), ivf.search(queries, 10)))
    blob = bytearray(path.read_bytes())
    blob[len(blob) // 2] ^= 1
    path.write_bytes(bytes(blob))
    with pytest.raises(ivf_module.SnapshotError):
        BinaryIVF.load(path, BITS)
    path.write_bytes(bytes(blob[:100]))
    with pytest.raises(ivf_module.SnapshotError):
        BinaryIVF.load(path, BITS)
    with pytest.raises(ivf_module.SnapshotError):
        BinaryIVF.load(tmp_path / "missing", BITS)


def test_adaptive_answers_flat_until_built_then_ivf(data) -> None:
    ids, codes, queries = data
    index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("ivf", nlist=64, nprobe=16))
    index.add(ids[:1000], codes[:1000])
    assert not index.wants_build() and index.answering == "flat"  # below IVF_MIN_WINDOWS
    index.add(ids[1000:], codes[1000:])
    assert index.maybe_build(background=False)
    assert index.answering == "ivf" and index.describe()["nlist"] == 64
    truth = exact_top(queries, codes, 10)
    d, got = index.search(queries, 10)
    assert 0.85 <= tie_tolerant_recall(truth, d, got) < 1.0 or np.array_equal(d, truth)
    # a per-query nprobe of every list is exact
    d, got = index.search(queries, 10, nprobe=64)
    assert np.array_equal(d, truth)
    # a deep scan goes to the exact flat index and is never short
    d, got = index.search(queries[:2], 5000)
    assert (got >= 0).all() and np.array_equal(d, np.sort(hamming_distances(queries[:2], codes), axis=1)[:, :5000])
    # deletes after the swap
    gone = ids[::2]
    assert index.remove(gone) == len(gone)
    for nprobe in (None, 1, 64):
        _, got = index.search(queries, 100, nprobe=nprobe)
        assert not np.isin(got, gone).any()
    assert len(index.ivf) == len(index) == len(ids) - len(gone)


def test_flat_kind_never_builds_and_auto_builds_past_its_threshold(data) -> None:
    ids, codes, _ = data
    flat = AdaptiveBinaryIndex(BITS, spec=IndexSpec("flat"), auto_windows=1)
    flat.add(ids, codes)
    assert not flat.maybe_build(background=False) and flat.answering == "flat"
    auto = AdaptiveBinaryIndex(BITS, spec=IndexSpec("auto"), auto_windows=15_000)
    auto.add(ids[:14_999], codes[:14_999])
    assert not auto.wants_build()
    auto.add(ids[14_999:], codes[14_999:])
    assert auto.maybe_build(background=False) and auto.answering == "ivf"
    assert auto.ivf.nlist == auto_nlist(len(ids))


def test_writes_during_a_background_build_reach_the_swapped_in_ivf(data, monkeypatch) -> None:
    ids, codes, queries = data
    index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("ivf", nlist=32))
    index.add(ids[:15_000], codes[:15_000])
    release, training = threading.Event(), threading.Event()
    real_train = BinaryIVF.train

    def slow_train(*args, **kwargs):
        training.set()
        assert release.wait(30)
        return real_train(*args, **kwargs)

    monkeypatch.setattr(BinaryIVF, "train", staticmethod(slow_train))
    assert index.maybe_build()
    assert training.wait(30)
    assert index.building and index.answering == "flat"
    # writes while the IVF trains: the flat index answers them at once
    index.add(ids[15_000:], codes[15_000:])
    gone = ids[:15_000:4]
    index.remove(gone)
    index.remove([int(ids[1])])
    index.add([int(ids[1])], queries[:1])  # an upsert mid-build
    _, got = index.search(queries, 50)
    assert not np.isin(got, gone).any()
    release.set()
    assert index.wait_for_build(60)
    assert index.answering == "ivf" and not index.building
    # the IVF holds exactly the flat index's codes: every list probed, all ids come back
    _, got = index.search(queries[:1], len(index), nprobe=32)
    assert np.array_equal(np.sort(got[0]), index.ids())
    d, got = index.search(queries[:1], 1, nprobe=32)
    assert got[0, 0] == ids[1] and d[0, 0] == 0


def test_snapshot_carries_the_ivf_and_drops_a_stale_one(data, tmp_path) -> None:
    ids, codes, queries = data
    spec = IndexSpec("ivf", nlist=32, nprobe=8)
    index = AdaptiveBinaryIndex(BITS, spec=spec)
    index.add(ids, codes)
    index.maybe_build(background=False)
    path = tmp_path / "c.binary.faiss"
    index.save(path, last_seq=7)
    back, seq = AdaptiveBinaryIndex.load(path, spec=spec)
    assert seq == 7 and back.answering == "ivf" and len(back.ivf) == len(ids)
    assert all(np.array_equal(a, b) for a, b in zip(back.search(queries, 10), index.search(queries, 10)))
    # an IVF file of another sequence is not trusted: flat answers, and a rebuild is wanted
    index.ivf.save(ivf_path(path), last_seq=6)
    back, _ = AdaptiveBinaryIndex.load(path, spec=spec)
    assert back.ivf is None and back.answering == "flat" and back.wants_build()
    # a flat kind ignores (and its next snapshot removes) an IVF file
    flat, _ = AdaptiveBinaryIndex.load(path, spec=IndexSpec("flat"))
    assert flat.ivf is None
    flat.save(path, last_seq=8)
    assert not ivf_path(path).exists()


def test_a_failed_build_leaves_flat_answering(data, monkeypatch) -> None:
    ids, codes, queries = data
    index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("ivf", nlist=32))
    index.add(ids, codes)

    def broken(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(BinaryIVF, "train", staticmethod(broken))
    assert index.maybe_build()
    assert index.wait_for_build(30)
    assert index.answering == "flat" and "MemoryError" in index.describe()["last_error"]
    assert not index.wants_build()  # retried only after the collection doubles
    assert index.search(queries, 10)[1].shape == (len(queries), 10)


def test_bench_runs_end_to_end_on_tiny_sizes(tmp_path) -> None:
    from bench.index.index_kinds import main

    out = tmp_path / "kinds.json"
    result = main(["--sizes", "3000", "--bits", "256", "--queries", "20", "--no-hnsw", "--no-multihash", "--nprobe", "1", "64", "--out", str(out)])
    block = result["blocks"][0]
    assert block["flat"]["recall_at_10"] == 1.0
    runs = {(r["nlist"], r["nprobe"]): r for r in block["runs"]}
    assert runs[(64, 64)]["recall_at_10"] == 1.0  # every list probed: exact
    assert any(r["default"] for r in block["runs"])
    assert all(r["p50_ms"] > 0 and r["speedup_p50_vs_flat"] > 0 for r in block["runs"])
    overhead = main(["--sizes", "3000", "--bits", "256", "--overhead-only", "--out", str(tmp_path / "o.json")])["overhead"][0]
    assert overhead["p50_ratio"] > 0


def test_the_build_runs_faiss_on_one_thread_and_leaves_the_callers_setting(data, monkeypatch) -> None:
    import faiss

    ids, codes, _ = data
    seen: list[int] = []
    real_train = BinaryIVF.train

    def recording_train(*args, **kwargs):
        seen.append(faiss.omp_get_max_threads())
        return real_train(*args, **kwargs)

    monkeypatch.setattr(BinaryIVF, "train", staticmethod(recording_train))
    saved = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(3)
    try:
        for background in (True, False):
            index = AdaptiveBinaryIndex(BITS, spec=IndexSpec("ivf", nlist=32))
            index.add(ids, codes)
            assert index.maybe_build(background=background) and index.wait_for_build(60)
            assert index.answering == "ivf"
            assert faiss.omp_get_max_threads() == 3  # the caller's thread keeps its own setting
    finally:
        faiss.omp_set_num_threads(saved)
    assert seen == [1, 1]
