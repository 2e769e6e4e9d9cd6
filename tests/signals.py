"""Waiting in tests: on the event itself, never for a guessed length of time.

A test that must let something happen first (a job settled, a backend blocked on a lock, a
listener asleep, a line printed) waits for exactly that, bounded by a timeout, and fails with
a message saying what never happened. A fixed ``time.sleep`` stays only where time passing is
the point (an outage lasts, a window in which to count what happens, a handler slow on purpose),
with a comment saying so.

The database's own views are the signals for what happens inside the server:
``pg_blocking_pids`` for a lock wait, ``pg_stat_activity`` for a session's last statement and
state, ``pg_stat_user_functions`` for the queue's functions a program has run. The connection
that watches them must be in autocommit mode: PostgreSQL reads those views once per
transaction.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

T = TypeVar("T")

WAIT_TIMEOUT = 15.0
"""How long a test waits for something that should happen within moments, unless it says."""

INTERVAL = 0.02
"""How often a condition is checked: short next to any wait, long next to one check."""


def poll_until(
    condition: Callable[[], T | None], timeout: float = WAIT_TIMEOUT, *, interval: float = INTERVAL
) -> T | None:
    """The first truthy value ``condition`` returns within ``timeout`` seconds, or None if it
    returns none. For a test that goes on either way; :func:`wait_until` fails instead. An
    exception ``condition`` raises propagates at once."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


def wait_until(
    condition: Callable[[], T | None],
    what: str | Callable[[], str],
    timeout: float = WAIT_TIMEOUT,
    *,
    interval: float = INTERVAL,
) -> T:
    """The first truthy value ``condition`` returns, checked every ``interval`` seconds; the
    test fails if none comes within ``timeout`` seconds, with "timed out after N s waiting for
    ``what``" (a callable ``what`` is called then, to report the state the wait ended in).
    An exception ``condition`` raises (an assert that a process is still alive, say)
    propagates at once."""
    value = poll_until(condition, timeout, interval=interval)
    if value is None:
        awaited = what() if callable(what) else what
        pytest.fail(f"timed out after {timeout:.1f} s waiting for {awaited}")
    return value


def wait_for(event: threading.Event, what: str, timeout: float = WAIT_TIMEOUT) -> None:
    """Return once ``event`` is set; the test fails if it is not within ``timeout`` seconds."""
    if not event.wait(timeout):
        pytest.fail(f"timed out after {timeout:.1f} s waiting for {what}")


def wait_until_blocked(
    monitor: psycopg.Connection[Any],
    waiting: int,
    holding: int,
    pending: Future[Any] | None = None,
    timeout: float = WAIT_TIMEOUT,
) -> None:
    """Return once backend ``waiting`` waits for a lock backend ``holding`` holds, as
    ``pg_blocking_pids`` sees it. The test fails after ``timeout`` seconds, or at once if
    ``pending`` (the waiting call, run on another thread) returns instead of blocking."""
    blockers: list[int] = []

    def blocked() -> bool:
        if pending is not None and pending.done():
            pytest.fail(
                f"backend {waiting} was expected to wait for backend {holding}, but its call "
                f"returned without blocking: {pending.result()!r}"
            )
        row = monitor.execute("SELECT pg_blocking_pids(%s)", (waiting,)).fetchone()
        blockers[:] = row[0] if row else []
        return holding in blockers

    wait_until(
        blocked,
        lambda: (
            f"backend {waiting} to be blocked by backend {holding} "
            f"(last pg_blocking_pids: {blockers})"
        ),
        timeout,
        interval=0.005,
    )


def query_start(monitor: psycopg.Connection[Any], pid: int) -> datetime:
    """When backend ``pid`` started its last statement (pg_stat_activity.query_start): the mark
    to give :func:`wait_until_idle_after`, taken before the statement to wait for is sent."""
    row = monitor.execute(
        "SELECT query_start FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    assert row is not None, f"no backend {pid}"
    return row[0]  # type: ignore[no-any-return]


def wait_until_idle_after(
    monitor: psycopg.Connection[Any],
    pid: int,
    statement: str,
    after: datetime,
    timeout: float = WAIT_TIMEOUT,
) -> None:
    """Return once backend ``pid`` is idle and its last statement contains ``statement`` and
    started after ``after`` (see :func:`query_start`): the session has run that statement and
    waits for its client, whatever the client does next (wait for a notification, say)."""

    def idle_after() -> bool:
        row = monitor.execute(
            "SELECT state, query, query_start FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        return row is not None and row[0] == "idle" and statement in row[1] and row[2] > after

    wait_until(idle_after, f"backend {pid} to be idle after a new {statement!r}", timeout)


def track_function_calls(admin: psycopg.Connection[Any], role: str) -> None:
    """Count the PL/pgSQL function calls of ``role``'s sessions opened from now on, for
    :func:`function_calls` (track_functions: only a superuser may set it, so ``admin`` is
    one's connection)."""
    admin.execute(sql.SQL("ALTER ROLE {} SET track_functions = 'pl'").format(sql.Identifier(role)))


def function_calls(monitor: psycopg.Connection[Any], function: str) -> int:
    """How many calls of ``function`` (schema-qualified) pg_stat_user_functions counts in the
    monitor's database. A session reports its calls when it goes idle, within a second of
    making them."""
    schema, name = function.split(".")
    row = monitor.execute(
        "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions"
        " WHERE schemaname = %s AND funcname = %s",
        (schema, name),
    ).fetchone()
    assert row is not None
    return int(row[0])
