"""The one way the SDK sends a statement: :func:`run` and :func:`run_async` execute one
:class:`~postkit.queue.protocol.Call` on a cursor (or connection) and read its rows, under one
error policy.

The policy, the same for every statement the package sends:

- a closed cursor or connection that the caller gave (to a client, or to an admin call)
  raises :class:`~postkit.errors.ClientClosedError` before anything is sent; on a connection
  the package holds for itself (a listener's, the vacuum service's) a closed connection is a
  lost one, and raises the driver's error like any lost connection, which is what their
  reconnect loops catch;
- a driver error the SQL module raised (a ``PKQ`` SQLSTATE, a privilege refusal, a missing
  schema) becomes its :mod:`postkit.errors` exception, chained to the driver's
  (:func:`~postkit.errors.translate_error`);
- any other error (a lost connection, a deadlock) reaches the caller as the driver raised it,
  so that retry logic written for the driver keeps working.

Rows come back as dictionaries whatever the cursor's row factory (:mod:`postkit.queue.rows`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from postkit import errors
from postkit.queue.rows import as_dicts

if TYPE_CHECKING:
    from postkit.queue.protocol import Call

T = TypeVar("T")


@contextlib.contextmanager
def translated() -> Iterator[None]:
    """Raise a driver error from the block as its Postkit exception (chained to it), when the
    SQL module raised it; any other error leaves the block unchanged."""
    try:
        yield
    except Exception as exc:
        translation = errors.translate_error(exc)
        if translation is None:
            raise
        raise translation from exc


def _cursor(target: Any, given_to: str | None) -> Any:
    """The cursor to run on: ``target`` itself, or a new cursor of a psycopg connection.

    Raises:
        ClientClosedError: ``given_to`` is set and the cursor or its connection is closed.
    """
    is_connection = isinstance(target, (psycopg.Connection, psycopg.AsyncConnection))
    if given_to is not None:
        connection = target if is_connection else getattr(target, "connection", None)
        if getattr(target, "closed", False) or getattr(connection, "closed", False):
            raise errors.ClientClosedError(
                f"the cursor (or its connection) given to {given_to} is closed"
            )
    return target.cursor() if is_connection else target


def run(target: Any, call: Call[T], *, given_to: str | None) -> T:
    """Execute ``call`` on ``target`` (a DB-API cursor, or a psycopg connection, which runs it
    on a new cursor) and parse its rows.

    ``given_to`` names what the caller gave ``target`` to (``"QueueClient"``), for the
    ClientClosedError; None for a connection the package holds for itself.

    Raises:
        ClientClosedError: the caller's ``target`` (or its connection) is closed; nothing is
            sent.
        PostkitError: the SQL module refused the statement (see the module docstring).
    """
    cursor = _cursor(target, given_to)
    with translated():
        cursor.execute(call.sql, call.params or None)
        fetched = cursor.fetchall() if cursor.description is not None else []
        rows = as_dicts(cursor.description, fetched)
    return call.parse(rows)


async def run_async(target: Any, call: Call[T], *, given_to: str | None) -> T:
    """:func:`run`, on a psycopg 3 async cursor or ``AsyncConnection``."""
    cursor = _cursor(target, given_to)
    with translated():
        await cursor.execute(call.sql, call.params or None)
        fetched = await cursor.fetchall() if cursor.description is not None else []
        rows = as_dicts(cursor.description, fetched)
    return call.parse(rows)
