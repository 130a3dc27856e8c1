"""The catalog's text rules (app/storage/text_rules.py) on both backends."""

from __future__ import annotations

import pytest

from app.errors import InvalidInput, NotFound
from app.storage.text_rules import ID_MAX, check_text, is_item_id
from tests.storage.test_shared_catalog import _collection, _item


@pytest.mark.parametrize("item_id, ok", [
    ("a", True), ("x" * ID_MAX, True), ("名前 with spaces", True),
    ("", False), ("x" * (ID_MAX + 1), False), ("a\x00b", False), ("tab\there", False), ("line\n", False), (None, False),
])
def test_the_item_id_rule(item_id, ok):
    assert is_item_id(item_id) is ok


def test_free_text_may_hold_anything_but_nul():
    assert check_text("tab\t, newline\n, é", "description") == "tab\t, newline\n, é"
    assert check_text(None, "description") is None
    with pytest.raises(InvalidInput, match="NUL"):
        check_text("a\x00", "description")


def test_lookups_by_an_id_that_cannot_exist_find_nothing_on_both_backends(open_catalog):
    catalog = open_catalog()
    catalog.create_collection(_collection())
    catalog.upsert_items("c", [_item("a")])
    for bad in ("a\x00", "a\n", ""):
        with pytest.raises(NotFound):
            catalog.get_item("c", bad)
        with pytest.raises(NotFound):
            catalog.delete_item("c", bad)
        assert len(catalog.item_segments("c", bad, 16, 16)[0]) == 0
        assert catalog.items_by_id("c", [bad, "a"]).keys() == {"a"}
        assert catalog.segments_of_items("c", [bad], 16, 16) == {}
        assert catalog.get_job(bad) is None
    assert catalog.counts("c") == (1, 2)


def test_postgres_refuses_a_nul_with_invalid_input_not_a_driver_error(pg_url):
    # the backstop for any statement not guarded above: a 422 the API documents, never psycopg's DataError (a 500)
    from app.storage.postgres import PostgresCatalog

    catalog = PostgresCatalog(pg_url)
    with pytest.raises(InvalidInput, match="NUL"):
        catalog.counts("c\x00")
    with pytest.raises(InvalidInput, match="NUL"):
        catalog.create_collection(_collection("d\x00"))
    assert catalog.list_collections() == []
