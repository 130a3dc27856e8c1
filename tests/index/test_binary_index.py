"""BinaryIndex against the numpy reference, plus ids, padding and validation."""

from __future__ import annotations

import numpy as np
import pytest

from app.index import HAMMING_PAD, BinaryIndex, DuplicateIdError
from app.index import exact
from tests.index.conftest import assert_knn_consistent, clustered_codes, random_codes


@pytest.mark.parametrize("bits", [8, 64, 256, 264, 1024])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_search_matches_exact(rng: np.random.Generator, bits: int, shards: int) -> None:
    codes = clustered_codes(rng, 700, bits)
    ids = rng.permutation(10_000)[:700].astype(np.int64)
    index = BinaryIndex(bits, shards=shards)
    index.add(ids, codes)
    queries = np.concatenate([codes[:5], random_codes(rng, 6, bits)])
    for k in (1, 10, 50):
        distances, labels = index.search(queries, k)
        assert distances.dtype == np.int32 and labels.dtype == np.int64
        assert_knn_consistent(distances, labels, exact.hamming_distances(queries, codes), ids, k, ascending=True)


def test_exact_reference_counts_bits() -> None:
    # 0x00 vs 0xFF differs in 8 bits, 0x0F vs 0x01 in 3: checks the reference itself.
    a = np.array([[0x00, 0x0F]], dtype=np.uint8)
    b = np.array([[0xFF, 0x01], [0x00, 0x0F]], dtype=np.uint8)
    assert exact.hamming_distances(a, b).tolist() == [[11, 0]]


def test_bit_order_is_faiss_little_endian() -> None:
    # A code differing from the query only in bit 0 of the unpacked vector is at distance 1,
    # whichever packing is used; what matters is that packbits(little) round-trips through
    # reconstruct unchanged.
    bits = np.zeros((1, 16), dtype=np.uint8)
    bits[0, 0] = 1
    code = np.packbits(bits, axis=1, bitorder="little")
    assert code.tolist() == [[1, 0]]
    index = BinaryIndex(16, shards=1)
    index.add([7], code)
    np.testing.assert_array_equal(np.unpackbits(index.reconstruct([7]), axis=1, bitorder="little"), bits)
    distances, _ = index.search(np.zeros((1, 2), dtype=np.uint8), 1)
    assert distances.tolist() == [[1]]


def test_parallel_shards_equal_single_shard(rng: np.random.Generator) -> None:
    codes = clustered_codes(rng, 3000, 256, centres=4)
    ids = np.arange(3000, dtype=np.int64) * 3
    single = BinaryIndex(256, shards=1)
    sharded = BinaryIndex(256, shards=4)
    sharded.parallel_min_rows = 0  # force the thread-pool path on a small index
    single.add(ids, codes)
    sharded.add(ids, codes)
    assert sum(sharded.shard_sizes()) == 3000 and max(sharded.shard_sizes()) - min(sharded.shard_sizes()) <= 1
    queries = random_codes(rng, 20, 256)
    d1, i1 = single.search(queries, 25)
    d2, i2 = sharded.search(queries, 25)
    np.testing.assert_array_equal(d1, d2)
    truth = exact.hamming_distances(queries, codes)
    assert_knn_consistent(d2, i2, truth, ids, 25, ascending=True)


def test_padding_when_k_exceeds_size(rng: np.random.Generator) -> None:
    index = BinaryIndex(64, shards=2)
    codes = random_codes(rng, 3, 64)
    index.add([5, 6, 7], codes)
    distances, labels = index.search(codes[:2], 5)
    assert sorted(labels[0, :3].tolist()) == [5, 6, 7]
    assert (labels[:, 3:] == -1).all() and (distances[:, 3:] == HAMMING_PAD).all()


def test_empty_index_returns_only_padding() -> None:
    index = BinaryIndex(64)
    distances, labels = index.search(np.zeros((2, 8), dtype=np.uint8), 3)
    assert (labels == -1).all() and (distances == HAMMING_PAD).all()
    assert len(index) == 0 and index.ids().tolist() == []


def test_batched_search_equals_one_at_a_time(rng: np.random.Generator) -> None:
    codes = random_codes(rng, 2000, 128)
    index = BinaryIndex(128, shards=2)
    index.parallel_min_rows = 0
    index.add(np.arange(2000), codes)
    queries = random_codes(rng, 16, 128)
    batch_d, _ = index.search(queries, 10)
    for q in range(16):
        one_d, _ = index.search(queries[q : q + 1], 10)
        np.testing.assert_array_equal(one_d[0], batch_d[q])


def test_remove_and_upsert_keep_ids_stable(rng: np.random.Generator) -> None:
    codes = random_codes(rng, 100, 64)
    index = BinaryIndex(64, shards=2)
    index.add(np.arange(100, 200), codes)
    assert index.remove([100, 150, 150, 999]) == 2  # duplicates and unknown ids ignored
    assert len(index) == 98 and 150 not in index and 151 in index
    # The survivors are still found under their own ids with their own codes.
    distances, labels = index.search(codes[[1, 99]], 1)
    assert labels[:, 0].tolist() == [101, 199] and distances[:, 0].tolist() == [0, 0]
    np.testing.assert_array_equal(index.reconstruct([199, 101]), codes[[99, 1]])
    # Upsert = remove then add with a new code.
    new_code = random_codes(rng, 1, 64)
    index.remove([120])
    index.add([120], new_code)
    np.testing.assert_array_equal(index.reconstruct([120]), new_code)
    assert index.search(new_code, 1)[1][0, 0] == 120


def test_adding_existing_id_is_an_error_and_adds_nothing(rng: np.random.Generator) -> None:
    index = BinaryIndex(64)
    index.add([1, 2], random_codes(rng, 2, 64))
    with pytest.raises(DuplicateIdError, match="already"):
        index.add([3, 2], random_codes(rng, 2, 64))
    with pytest.raises(DuplicateIdError, match="repeat"):
        index.add([4, 4], random_codes(rng, 2, 64))
    assert index.ids().tolist() == [1, 2]


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((2, 7), dtype=np.uint8), "8 bytes per row"),
        (np.zeros((2, 9), dtype=np.uint8), "8 bytes per row"),
        (np.zeros((2, 8), dtype=np.int64), "dtype uint8"),
        (np.zeros(8, dtype=np.uint8), "2-D"),
        ([[0] * 8] * 2, "numpy array"),
    ],
)
def test_wrong_size_or_dtype_is_rejected(bad: object, message: str) -> None:
    index = BinaryIndex(64)
    with pytest.raises(ValueError, match=message):
        index.add([1, 2], bad)
    with pytest.raises(ValueError, match=message):
        index.search(bad, 1)
    assert len(index) == 0


@pytest.mark.parametrize(
    "ids, message",
    [([1], "got 1 ids for 2"), ([-1, 2], ">= 0"), ([1.0, 2.0], "integers"), ([[1, 2]], "1-D")],
)
def test_bad_ids_are_rejected(ids: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BinaryIndex(64).add(ids, np.zeros((2, 8), dtype=np.uint8))


@pytest.mark.parametrize("k", [0, -1, 2.5, True])
def test_bad_k_is_rejected(k: object) -> None:
    with pytest.raises(ValueError, match="k must be"):
        BinaryIndex(64).search(np.zeros((1, 8), dtype=np.uint8), k)  # type: ignore[arg-type]


@pytest.mark.parametrize("bits", [0, 12, -8])
def test_bits_must_be_a_positive_multiple_of_8(bits: int) -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        BinaryIndex(bits)


def test_reconstruct_unknown_id_raises(rng: np.random.Generator) -> None:
    index = BinaryIndex(64)
    index.add([1], random_codes(rng, 1, 64))
    with pytest.raises(KeyError):
        index.reconstruct([1, 2])


def test_memory_bytes_counts_codes_and_ids(rng: np.random.Generator) -> None:
    index = BinaryIndex(256)
    index.add(np.arange(10_000), random_codes(rng, 10_000, 256))
    # At least codes (32 B) + row ids (8 B) + id map (16 B) per row; at most 2x for capacity.
    assert 56 * 10_000 <= index.memory_bytes() <= 2 * 56 * 10_000 + 100_000


@pytest.mark.parametrize("block_rows", [1, 64, 100, 1000])
@pytest.mark.parametrize("k", [1, 10, 200])
@pytest.mark.parametrize("bits", [64, 128, 256, 512])
def test_shared_scan_kernel_matches_exact_across_blocks(rng: np.random.Generator, block_rows: int, k: int, bits: int) -> None:
    # Small blocks put block boundaries and ragged tails inside small data; clustered codes
    # make distances tie often, also exactly at the k-th best. 256 bits takes the kernel's
    # four-word path, the other widths the generic one.
    from app.index.hamming.shared_scan import knn_hamming_shared

    codes = clustered_codes(rng, 2500, bits, centres=5)
    queries = np.concatenate([codes[:4], random_codes(rng, 5, bits)])
    distances, rows = knn_hamming_shared(queries, codes, k, block_rows)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(2500), k, ascending=True)


def test_shared_scan_distances_equal_a_bit_count(rng: np.random.Generator) -> None:
    # Hand-checkable reference: numpy's unpackbits count of the XOR, row by row.
    from app.index.hamming.shared_scan import knn_hamming_shared

    codes = random_codes(rng, 50, 256)
    queries = random_codes(rng, 3, 256)
    distances, rows = knn_hamming_shared(queries, codes, 50)
    for q in range(3):
        counted = np.unpackbits(np.bitwise_xor(codes[rows[q]], queries[q]), axis=1).sum(axis=1)
        np.testing.assert_array_equal(distances[q], counted)
        assert (np.diff(distances[q]) >= 0).all()


def test_shared_scan_accepts_non_contiguous_database(rng: np.random.Generator) -> None:
    from app.index.hamming.shared_scan import knn_hamming_shared

    wide = random_codes(rng, 600, 256)
    codes = wide[::2]  # strided rows: the kernel must not address them as a packed block
    queries = random_codes(rng, 5, 256)
    distances, rows = knn_hamming_shared(queries, codes, 7, 64)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(300), 7, ascending=True)


def test_shared_scan_rejects_partial_words(rng: np.random.Generator) -> None:
    from app.index.hamming.shared_scan import knn_hamming_shared

    with pytest.raises(ValueError, match="64-bit words"):
        knn_hamming_shared(random_codes(rng, 3, 24), random_codes(rng, 10, 24), 2)


@pytest.mark.parametrize("nq", [1, 2, 3, 4, 16])
def test_every_batch_size_matches_exact(rng: np.random.Generator, nq: int) -> None:
    # Whichever kernel a batch size picks (heap below BATCHED_MIN_QUERIES, shared scan above).
    from app.index.hamming.topk import knn_hamming

    codes = clustered_codes(rng, 3000, 256, centres=6)
    queries = np.concatenate([codes[:nq // 2], random_codes(rng, nq - nq // 2, 256)])
    distances, rows = knn_hamming(queries, codes, 12, block_rows=256)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(3000), 12, ascending=True)


def test_kernel_choice_does_not_change_results(rng: np.random.Generator) -> None:
    from app.index.hamming.topk import knn_hamming, knn_hamming_heap

    codes = random_codes(rng, 5000, 256)
    queries = random_codes(rng, 12, 256)
    batched_d, _ = knn_hamming(queries, codes, 15, block_rows=512)
    heap_d, _ = knn_hamming_heap(queries, codes, 15)
    np.testing.assert_array_equal(batched_d, heap_d)


def test_shared_scan_kernel_pads_when_k_exceeds_rows(rng: np.random.Generator) -> None:
    from app.index.hamming.shared_scan import knn_hamming_shared

    codes = random_codes(rng, 7, 64)
    queries = random_codes(rng, 6, 64)
    distances, rows = knn_hamming_shared(queries, codes, 10, 4)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(7), 10, ascending=True)
    assert (distances[:, 7:] == HAMMING_PAD).all()


def test_large_query_batches_are_split_into_passes(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    import app.index.hamming.topk as kernels

    monkeypatch.setattr(kernels, "MAX_BATCH_QUERIES", 4)
    codes = random_codes(rng, 900, 64)
    queries = random_codes(rng, 11, 64)  # passes of 4 + 4 + 3 queries
    distances, rows = kernels.knn_hamming(queries, codes, 6, block_rows=128)
    assert_knn_consistent(distances, rows, exact.hamming_distances(queries, codes), np.arange(900), 6, ascending=True)



def test_search_leaves_the_callers_openmp_threads_as_they_were(rng: np.random.Generator) -> None:
    # The calling thread scans one shard with a single OpenMP thread and must restore its own
    # setting, or FAISS calls it makes elsewhere would silently lose their parallelism.
    import faiss

    index = BinaryIndex(256, shards=2)
    index.parallel_min_rows = 10  # take the parallel branch on small data
    index.add(np.arange(200), random_codes(rng, 200, 256))
    saved = faiss.omp_get_max_threads()
    try:
        faiss.omp_set_num_threads(3)
        for nq in (1, 5):  # heap scan and shared-scan kernel
            distances, _ = index.search(random_codes(rng, nq, 256), 4)
            assert distances.shape == (nq, 4)
            assert faiss.omp_get_max_threads() == 3
    finally:
        faiss.omp_set_num_threads(saved)
