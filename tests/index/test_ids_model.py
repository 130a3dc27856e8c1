"""Random add/remove sequences checked against a plain dict model of the index."""

from __future__ import annotations

import numpy as np
import pytest

from app.index import BinaryIndex
from app.index import exact
from tests.index.conftest import assert_knn_consistent, random_codes


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_writes_match_dict_model(seed: int) -> None:
    rng = np.random.default_rng(seed)
    index = BinaryIndex(64, shards=3)
    index.parallel_min_rows = 0
    model: dict[int, np.ndarray] = {}
    next_id = 0
    for step in range(150):
        if rng.random() < 0.6 or not model:
            n = int(rng.integers(1, 60))
            if rng.random() < 0.3:  # out-of-order ids exercise the id map's merge path
                candidates = np.setdiff1d(rng.integers(0, next_id + 1000, 3 * n), list(model))[:n]
                ids = rng.permutation(candidates)
            else:
                ids = np.arange(next_id, next_id + n)
            next_id = max(next_id, int(ids.max()) + 1) if len(ids) else next_id
            codes = random_codes(rng, len(ids), 64)
            index.add(ids, codes)
            model.update({int(i): c for i, c in zip(ids, codes, strict=True)})
        else:
            present = np.array(list(model))
            gone = rng.choice(present, size=int(rng.integers(1, len(present) + 1)), replace=False)
            extra = rng.integers(10**9, 10**9 + 5, 2)  # unknown ids are ignored
            assert index.remove(np.concatenate([gone, extra])) == len(gone)
            for i in gone:
                del model[int(i)]
        assert len(index) == len(model)
        if step % 10 == 0 or step == 149:
            ids = np.array(sorted(model), dtype=np.int64)
            np.testing.assert_array_equal(index.ids(), ids)
            if len(ids):
                codes = np.stack([model[int(i)] for i in ids])
                np.testing.assert_array_equal(index.reconstruct(ids), codes)
                queries = random_codes(rng, 3, 64)
                d, labels = index.search(queries, 15)
                assert_knn_consistent(d, labels, exact.hamming_distances(queries, codes), ids, 15, ascending=True)


def test_mass_delete_shrinks_memory(rng: np.random.Generator) -> None:
    index = BinaryIndex(256, shards=2)
    index.add(np.arange(100_000), random_codes(rng, 100_000, 256))
    full = index.memory_bytes()
    index.remove(np.arange(99_000))
    assert index.memory_bytes() < full / 4
    assert index.ids().tolist() == list(range(99_000, 100_000))


def test_many_small_deletes_and_readds_across_compactions(rng: np.random.Generator) -> None:
    # Small deletes only mark ids dead until an eighth of the map is dead, then compact; ids
    # re-added while dead are revived in place. Both paths must keep ids and rows aligned.
    codes = random_codes(rng, 6000, 64)
    index = BinaryIndex(64, shards=2)
    index.add(np.arange(6000), codes)
    alive = np.ones(6000, dtype=bool)
    for step in range(300):
        gone = rng.choice(np.flatnonzero(alive), 10, replace=False)
        assert index.remove(gone) == 10
        alive[gone] = False
        if step % 3 == 0:  # upsert-style: some of the dead come back (with their own codes)
            back = rng.choice(np.flatnonzero(~alive), 5, replace=False)
            index.add(back, codes[back])
            alive[back] = True
    live = np.flatnonzero(alive)
    np.testing.assert_array_equal(index.ids(), live)
    np.testing.assert_array_equal(index.reconstruct(live), codes[live])
    assert len(index) == len(live)
    d, labels = index.search(codes[live[:20]], 1)
    assert (d[:, 0] == 0).all() and (labels[:, 0] == live[:20]).all()
