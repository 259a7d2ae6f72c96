"""Tables that remember what requests repeat (a stream's chunks carry the same values), bounded against
requests that never repeat: at its limit a table starts again, which costs a miss per entry, not memory."""

from __future__ import annotations

from typing import Hashable, TypeVar

V = TypeVar("V")
KEPT_STRING_MAX = 128  # characters of a client's string (a correlation id) kept in a key; longer ones never are


def remember(table: dict, key: Hashable, value: V, limit: int) -> V:
    """Store `value` under `key`, emptying `table` first when it already holds `limit` entries; returns `value`."""
    if len(table) >= limit:
        table.clear()
    table[key] = value
    return value
