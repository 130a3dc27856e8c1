"""reconstruct_present: the shortlist gather that skips ids deleted since the scan."""

from __future__ import annotations

import numpy as np
import pytest

from app.index import BinaryIndex, FloatIndex


@pytest.mark.parametrize("shards", [1, 3])
def test_matches_reconstruct_on_the_ids_still_present(shards: int) -> None:
    rng = np.random.default_rng(5)
    vectors = rng.standard_normal((300, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(1000, 1300, dtype=np.int64)
    index = FloatIndex(16, shards=shards)
    index.add(ids, vectors)
    index.remove(ids[::7])  # deleted after a scan shortlisted them

    asked = np.concatenate([ids[rng.permutation(300)[:120]], [5, 99999]])  # plus ids never added
    present, got = index.reconstruct_present(asked)

    alive = {int(i) for i in ids} - {int(i) for i in ids[::7]}
    expected_ids = np.asarray([i for i in asked.tolist() if i in alive], dtype=np.int64)
    np.testing.assert_array_equal(present, expected_ids)  # order kept, missing ones dropped
    np.testing.assert_array_equal(got, vectors[expected_ids - 1000])
    np.testing.assert_array_equal(got, index.reconstruct(expected_ids))


def test_binary_codes_and_empty_input() -> None:
    codes = np.random.default_rng(1).integers(0, 256, (50, 8), dtype=np.uint8)
    index = BinaryIndex(64, shards=2)
    index.add(np.arange(50, dtype=np.int64), codes)

    present, got = index.reconstruct_present(np.asarray([49, 3, 77], dtype=np.int64))
    assert present.tolist() == [49, 3]
    np.testing.assert_array_equal(got, codes[[49, 3]])
    present, got = index.reconstruct_present(np.zeros(0, dtype=np.int64))
    assert present.shape == (0,) and got.shape == (0, 8)
