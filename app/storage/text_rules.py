"""What text the catalog can hold, on both backends.

PostgreSQL cannot store, or even compare against, a string holding NUL (U+0000): psycopg refuses to
send one. SQLite can. Left alone, that difference turned a request carrying ``"a\\u0000b"`` into a
500 in cluster mode where the embedded service answered 404 (the cluster schemathesis run found it on
``POST .../judgments``). The rules here make both backends answer alike:

* an item id is 1-512 characters with no control character, checked when an item is written, so a
  lookup by an id that breaks the rule can answer "no such item" without asking the database;
* a free text the catalog stores (a description, a filename) may hold anything but NUL
  (:func:`check_text`), on both backends;
* any other string a statement would send to PostgreSQL with a NUL in it is refused as invalid input
  (422) before it is sent, never a 500 (see :func:`refuse_nul`).
"""

from __future__ import annotations

from typing import Any, Iterable

from app.errors import InvalidInput

ID_MAX = 512


def is_item_id(item_id: Any) -> bool:
    """Whether ``item_id`` could name a stored item (the rule :func:`check_item_id` applies on writes)."""
    return isinstance(item_id, str) and 0 < len(item_id) <= ID_MAX and not any(ord(ch) < 32 for ch in item_id)


def check_item_id(item_id: str) -> str:
    if not is_item_id(item_id):
        raise InvalidInput(f"item id {str(item_id)[:40]!r}: use 1-{ID_MAX} printable characters")
    return item_id


def check_text(value: str | None, what: str) -> str | None:
    """A free text the catalog stores (a description, a filename): anything but NUL, on both backends."""
    if value is not None and "\x00" in value:
        raise InvalidInput(f"{what} {value[:40]!r} holds a NUL character (\\u0000), which the catalog cannot store")
    return value


def refuse_nul(params: Iterable[Any]) -> None:
    """Raise :class:`InvalidInput` if a text parameter holds NUL, which PostgreSQL cannot take."""
    for value in params:
        if isinstance(value, str) and "\x00" in value:
            raise InvalidInput(f"the text {value[:40]!r} holds a NUL character (\\u0000), which the catalog cannot "
                               "store or compare; no id, name or description here contains one")
