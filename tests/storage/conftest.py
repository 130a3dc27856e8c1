"""The catalog under test, on both backends: every storage test that takes ``open_catalog`` runs twice."""

from __future__ import annotations

import pytest

from app.storage.catalog import Catalog


@pytest.fixture(params=["sqlite", "postgres"])
def open_catalog(request, tmp_path):
    """Opens the catalog under test; calling it again reopens the same store."""
    if request.param == "sqlite":
        yield lambda: Catalog(tmp_path / "c.db")
        return
    from app.storage.postgres import PostgresCatalog

    url = request.getfixturevalue("pg_url")
    yield lambda: PostgresCatalog(url)
