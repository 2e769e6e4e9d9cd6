"""Rows as dictionaries, whatever the cursor's row factory.

The SDK accepts any DB-API cursor: psycopg 3 with tuple, dict or namedtuple rows, psycopg2,
or Django's cursor wrapper. Everything it reads goes through here, so the rest of the code
sees one shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def as_dicts(description: Sequence[Any] | None, rows: Sequence[Any]) -> list[dict[str, Any]]:
    """Turn fetched rows into dictionaries keyed by column name."""
    if not rows:
        return []
    if isinstance(rows[0], Mapping):
        return [dict(row) for row in rows]
    names = [column[0] for column in description or ()]
    return [dict(zip(names, row, strict=True)) for row in rows]
