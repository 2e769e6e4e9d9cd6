"""A call: one named statement of ``queries.sql``, its parameters and how to read its rows."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache
from importlib import resources
from typing import Any, Generic, TypeVar

from postkit import errors
from postkit.queue.records import Job

T = TypeVar("T")

Rows = list[dict[str, Any]]

Duration = timedelta | float | int
"""A duration: a ``timedelta``, or a number of seconds."""

JobRef = Job | int
"""A job, or its id. A ``Job`` also carries its claim token, the fence."""

_QUERY_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def named_statements(text: str) -> dict[str, str]:
    """The statements of an SQL file in which each follows a ``-- name: NAME`` line, by name,
    without the whitespace around them (``queries.sql``, ``sql/install.sql``)."""
    pieces = _QUERY_HEADER.split(text)[1:]
    return {name: body.strip() for name, body in zip(pieces[::2], pieces[1::2], strict=True)}


@cache
def queries() -> dict[str, str]:
    """The named statements of ``queries.sql``, without their closing semicolon."""
    text = resources.files("postkit.queue").joinpath("queries.sql").read_text(encoding="utf-8")
    return {name: body.rstrip(";") for name, body in named_statements(text).items()}


@dataclass(frozen=True)
class Call(Generic[T]):
    """One SDK call: a named statement, its parameters, and how to read its rows."""

    name: str
    params: Mapping[str, Any]
    parse: Callable[[Rows], T]
    identifiers: Mapping[str, str] | None = None
    """Names the statement holds as ``{key}`` where no parameter may stand (LISTEN's
    channel): each is written into it quoted as an identifier."""
    asynchronous: bool = False
    """Commit without waiting for the WAL flush (:meth:`committed_asynchronously`)."""

    @property
    def sql(self) -> str:
        statement = queries()[self.name]
        if self.identifiers is not None:
            statement = statement.format_map(
                {key: _identifier(name) for key, name in self.identifiers.items()}
            )
        if self.asynchronous:
            return queries()["asynchronous_commit"].format(statement=statement)
        return statement

    def committed_asynchronously(self) -> Call[T]:
        """This call, committing without waiting for the WAL flush: for a statement that is its
        own transaction (autocommit), as a worker's claims and settlements are. The setting is
        the transaction's (``set_config(..., true)``), never the session's. Run inside a
        caller's transaction, it would make that whole transaction's commit asynchronous."""
        return replace(self, asynchronous=True)


def _identifier(name: str) -> str:
    """``name`` quoted as a PostgreSQL identifier, as libpq's PQescapeIdentifier quotes it."""
    if "\x00" in name:
        raise errors.InvalidNameError("an identifier must not contain a NUL character")
    return '"' + name.replace('"', '""') + '"'
