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


_OPTIONAL_LINE = re.compile(r"^(?P<sql>.*?)\s*-- when (?P<parameter>\w+) is given$")


@cache
def queries() -> dict[str, str]:
    """The named statements of ``queries.sql``, without their closing semicolon, each as the
    file writes it: with every optional line (:func:`optional_parameters`)."""
    text = resources.files("postkit.queue").joinpath("queries.sql").read_text(encoding="utf-8")
    return {name: body.rstrip(";") for name, body in named_statements(text).items()}


@cache
def optional_parameters(name: str) -> tuple[str, ...]:
    """The parameters of statement ``name`` that it passes only when they are given: each
    stands on a line of its own that ends with ``-- when PARAMETER is given``, and passes it by
    name (``p_x => %(x)s``). A call that leaves them out sends the statement without those
    lines, which a database whose SQL module predates them still runs: one statement per call,
    whatever the module's version, instead of one variant per combination."""
    return tuple(
        match["parameter"]
        for line in queries()[name].splitlines()
        if (match := _OPTIONAL_LINE.match(line)) is not None
    )


@cache
def statement(name: str, given: frozenset[str] = frozenset()) -> str:
    """Statement ``name`` with the optional lines of the parameters in ``given`` and without
    the others (:func:`optional_parameters`)."""
    lines = []
    for line in queries()[name].splitlines():
        match = _OPTIONAL_LINE.match(line)
        if match is None:
            lines.append(line)
        elif match["parameter"] in given:
            lines.append(match["sql"])
    return "\n".join(lines)


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
        optional = optional_parameters(self.name)
        if optional:
            given = frozenset(name for name in optional if self.params.get(name) is not None)
            text = statement(self.name, given)
        else:
            text = queries()[self.name]
        if self.identifiers is not None:
            text = text.format_map(
                {key: _identifier(name) for key, name in self.identifiers.items()}
            )
        if self.asynchronous:
            return queries()["asynchronous_commit"].format(statement=text)
        return text

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
