"""What the operating commands share: a connection of their own, confirmation, the guard
against a queue name the namespace has never seen, and a few cells of their tables.

Every command opens its own connection and commits after each write on it: the CLI owns its
transaction, unlike the SDK, which writes in its caller's.
"""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import click
import psycopg

from postkit.cli.output import Ago, compact_json, first_line
from postkit.embedded import resolve_dsn
from postkit.errors import SchemaNotInstalledError
from postkit.queue import QueueClient, installed_version, latest_version

_KNOWN_SHOWN = 10


class BadArgument(click.ClickException):
    """A value the command, the SDK or the SQL module refused: a bad argument, exit code 2 as
    for click's own, but one `Error:` line without the usage hint."""

    exit_code = 2


"""Known queues named in an unknown queue's error; the rest are counted."""


@contextlib.contextmanager
def connect(
    dsn: str | None, namespace: str
) -> Iterator[tuple[psycopg.Connection[Any], QueueClient]]:
    """A connection of the CLI's own and a QueueClient on it, closed afterwards. The command
    commits or rolls back on the connection; the client only sends the calls."""
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        yield connection, QueueClient(connection.cursor(), namespace=namespace)


def require_schema(dsn: str) -> None:
    """Fail early, in one line, when the database is unreachable or lacks the queue schema
    (or has an older version of it)."""
    with psycopg.connect(dsn) as connection:
        version = installed_version(connection.cursor())
    if version < latest_version():
        raise SchemaNotInstalledError(
            f"the queue schema is not installed (or older than version {latest_version()}) "
            "in this database; run `postkit install` first"
        )


def confirm(question: str, yes: bool) -> None:
    """Ask on stderr (stdout stays clean for --json); declining aborts with exit code 1."""
    if not yes:
        click.confirm(question, abort=True, err=True)


def namespace_argument(namespace: str) -> str:
    """The --namespace argument to repeat in a suggested command, when not the default."""
    return "" if namespace == "default" else f" --namespace {namespace}"


def require_known_queue(
    client: QueueClient, queue: str | None, *, option: str = "", create: bool | None = None
) -> None:
    """Refuse, in one line, a queue name the namespace has never seen (a typo, most often),
    with a did-you-mean hint and the known queues. ``create`` is None for a command that only
    reads (a new name has nothing to show), else whether --create was given.

    The check is the command line's: the SQL functions and the SDK accept any name.
    """
    if queue is None or create or not queue.strip():
        return  # a blank name is the SQL module's to refuse, with its own message
    known = client.known_queues()
    if queue in known:
        return
    label = f"{option} {queue!r}" if option else f"queue {queue!r}"
    message = (
        f"{label} is unknown in namespace {client.namespace!r} (no jobs, dead letters, "
        "settings, schedule or worker, and no outcomes in the last hour)."
    )
    close = difflib.get_close_matches(queue, known, n=1, cutoff=0.6)
    if close:
        message += f" Did you mean {close[0]!r}?"
    if known:
        more = f" and {len(known) - _KNOWN_SHOWN} more" if len(known) > _KNOWN_SHOWN else ""
        message += f" Known queues: {', '.join(known[:_KNOWN_SHOWN])}{more}."
    else:
        message += " The namespace has no queues yet."
    if create is not None:
        message += " Pass --create to use a new queue name."
    raise BadArgument(message)


def payload_text(payload: Any, payload_error: str | None) -> str:
    """A payload for a table: its JSON, or why Python could not decode it."""
    return f"({payload_error})" if payload_error is not None else compact_json(payload)


def resolve_moments(
    client: QueueClient, *moments: datetime | Ago | None
) -> tuple[datetime | None, ...]:
    """``--since``/``--until`` values as times: a duration ago by the queue's clock (read once,
    so that both are measured from the same now), an ISO time as it is."""
    now: datetime | None = None
    resolved: list[datetime | None] = []
    for moment in moments:
        if isinstance(moment, Ago):
            now = now or client.clock()
            resolved.append(moment.before(now))
        else:
            resolved.append(moment)
    return tuple(resolved)


def last_error(errors_: Sequence[Mapping[str, Any]]) -> str:
    return first_line(str(errors_[-1].get("error") or "")) if errors_ else ""
