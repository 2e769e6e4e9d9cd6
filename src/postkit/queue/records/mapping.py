"""The base of every record (a read-only mapping with a typed attribute view: ``job["payload"]``
and ``job.payload`` are the same value), and :func:`to_jsonable`, which prints them as JSON."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any


class _RecordMapping(Mapping[str, Any]):
    """Lets a frozen dataclass be read as a mapping of its fields."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._field_names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]


_DECODED_FIELDS = ("payload", "value")
"""The fields of records that hold decoded JSON (a job's payload, a result's value)."""


def to_jsonable(value: Any) -> Any:
    """SDK records (dataclasses, mappings), times and durations as plain JSON values: times in
    ISO 8601, durations in seconds. A record's payload, and a result's value, is decoded JSON
    already and passes as it is: walking it would exhaust the recursion limit on a value nested
    a few hundred deep, which json.dumps still writes."""
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: getattr(value, field.name)
            if field.name in _DECODED_FIELDS
            else to_jsonable(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(item) for item in value]
    return str(value)  # Decimal, UUID
