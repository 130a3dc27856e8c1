"""segment_items: a lookup by segment id answers for the named collection only."""

from __future__ import annotations

import numpy as np
import pytest

from app.encoders.base import l2_normalise, sign_codes
from app.storage.catalog import Catalog, Collection, NewItem

DIM, BITS = 16, 16


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request, tmp_path):
    if request.param == "sqlite":
        db = Catalog(tmp_path / "c.db")
    else:
        from app.storage.postgres import PostgresCatalog

        db = PostgresCatalog(request.getfixturevalue("pg_url"))
    yield db
    db.close()


def _item(item_id: str, n: int, seed: int) -> NewItem:
    raw = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return NewItem(item_id, None, None, None, {}, np.array([[i * 0.5, i * 0.5 + 1.0] for i in range(n)]),
                   l2_normalise(raw), sign_codes(raw))


def test_ids_of_another_collection_or_unknown_ids_are_left_out(catalog) -> None:
    for name in ("a", "b"):
        catalog.create_collection(Collection(name, "audio", "x", ("binary", "float"), DIM, BITS, 1.0, 0.5, False, "", 1.0))
    catalog.upsert_items("a", [_item("x", 3, 1), _item("y", 1, 2)])
    catalog.upsert_items("b", [_item("z", 2, 3)])
    a_ids = catalog.all_segment_ids("a")
    b_ids = catalog.all_segment_ids("b")

    found = catalog.segment_items("a", np.concatenate([a_ids, b_ids, [10**9]]))

    assert sorted(found) == sorted(a_ids.tolist())
    owners = sorted(item for item, _, _ in found.values())
    assert owners == ["x", "x", "x", "y"]
    starts = sorted(start for item, start, _ in found.values() if item == "x")
    assert starts == [0.0, 0.5, 1.0]
    assert catalog.segment_items("b", a_ids) == {}
