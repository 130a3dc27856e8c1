"""IVF list balance: distinct centroids after refinement, the list cap's assignment, and the capped IVF still exact
at full probe (against brute force), through deletes and a snapshot."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from app.index import BinaryIVF
from app.index.exact import hamming_distances
from app.index.ivf import capped_assignment, refine_centroids
from bench.index.index_kinds import clustered_codes

BITS = 256


@pytest.fixture(scope="module")
def crowded() -> tuple[np.ndarray, np.ndarray]:
    """Clustered codes where one cluster holds half of them: the crowd that makes one list long."""
    codes, queries = clustered_codes(12_000, BITS, 30, seed=3)
    rng = np.random.default_rng(3)
    crowd = np.repeat(codes[:1], 12_000, axis=0)
    flips = rng.random((12_000, BITS)) < 0.12  # variants of one code, ~30 bits away from it
    crowd = np.packbits(np.unpackbits(crowd, axis=1, bitorder="little") ^ flips, axis=1, bitorder="little")
    return np.concatenate([codes, crowd]), queries


def test_refinement_leaves_no_duplicate_centroid_and_no_empty_list(crowded) -> None:
    codes, _ = crowded
    sample = codes[np.random.default_rng(0).choice(len(codes), 64 * 32, replace=False)]
    start = np.repeat(sample[:4], 8, axis=0)  # 32 centroids, only 4 distinct: what the sign of k-means can give
    refined = refine_centroids(sample, start, rounds=6)
    assert len(np.unique(refined, axis=0)) == 32
    assignment = np.argmin(hamming_distances(sample, refined), axis=1)
    assert (np.bincount(assignment, minlength=32) > 0).all()


def test_capped_assignment_by_hand() -> None:
    nearest = np.array([[0, 1], [0, 1], [0, 2], [1, 2]])
    distances = np.array([[5, 9], [1, 7], [3, 4], [2, 6]])
    sizes = np.array([1, 0, 0])
    # room under the cap of 2: list 0 has 1 place, list 1 two, list 2 two; list 0's place goes to its nearest code (1)
    assert capped_assignment(nearest, distances, sizes, cap=2).tolist() == [1, 0, 2, 1]
    # every choice full: the nearest list all the same (the cap bounds the overflow, never drops a code)
    assert capped_assignment(nearest, distances, np.array([2, 2, 2]), cap=2).tolist() == [0, 0, 0, 1]


def test_capped_ivf_is_exact_at_full_probe_and_keeps_its_counts(crowded, tmp_path) -> None:
    codes, queries = crowded
    ids = np.arange(len(codes), dtype=np.int64) * 7 + 2
    plain = BinaryIVF.train(codes, 32, refine=False)
    plain.list_cap = None
    plain.add(ids, codes)
    capped = BinaryIVF.train(codes, 32)
    capped.list_cap = 2.0
    for start in range(0, len(codes), 5000):  # several writes: the cap holds across them
        capped.add(ids[start : start + 5000], codes[start : start + 5000])
    cap = int(np.ceil(2.0 * len(codes) / 32))
    assert plain.list_sizes().max() > cap  # the crowd overfills a list without the cap
    sizes = capped.list_sizes()
    assert sizes.sum() == len(codes) and np.array_equal(sizes, capped._count_lists())
    assert sizes.max() < 0.7 * plain.list_sizes().max()  # the crowd spread over its neighbouring lists
    truth = np.sort(hamming_distances(queries, codes), axis=1)[:, :10]
    d, got = capped.search(queries, 10, nprobe=32)
    assert np.array_equal(d, truth)
    own = np.unpackbits(queries[:, None, :] ^ codes[(got - 2) // 7], axis=2).sum(axis=2)  # the returned ids' codes
    assert np.array_equal(own, truth)
    gone = ids[::3]
    assert capped.remove(gone) == len(gone)
    assert capped.list_sizes().sum() == len(codes) - len(gone)
    assert not np.isin(capped.search(queries, 50, nprobe=32)[1], gone).any()
    capped.save(tmp_path / "x.ivf", last_seq=3)
    back, _ = BinaryIVF.load(tmp_path / "x.ivf", BITS)
    assert np.array_equal(back.list_sizes(), capped.list_sizes())


def test_refined_centroids_are_what_the_quantizer_holds(crowded) -> None:
    codes, _ = crowded
    ivf = BinaryIVF.train(codes, 32)
    quantizer = faiss.downcast_IndexBinary(ivf._index.quantizer)
    centroids = faiss.vector_to_array(quantizer.xb).reshape(32, BITS // 8)
    assert quantizer.ntotal == 32 and len(np.unique(centroids, axis=0)) == 32


def test_balance_bench_measures_every_variant(crowded) -> None:
    from bench.index.ivf_balance import measure

    codes, queries = crowded
    result = measure(codes, queries[:20], nlist=32, nprobes=[1, 32], caps=[2.0], lock=False, passes=1)
    names = [run["variant"] for run in result["runs"]]
    assert names == ["faiss", "faiss_sample_256", "refined", "capped_2"]
    for run in result["runs"]:
        full = run["nprobe"][-1]
        assert full["recall_at_10"] == 1.0 and full["scanned_max"] == len(codes)  # every list probed: exact
        assert run["lists"]["max"] >= run["lists"]["median"]
    assert result["at_equal_recall"]["least_scanned_p99"] in names
