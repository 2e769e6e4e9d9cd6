"""Fixtures for tests where one transaction must wait for another, for tests that need a database
of their own, and for tests that read the plans the functions really run."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient, install
from tests import on_citus, one_namespace_per_call, signals

BLOCK_TIMEOUT = 10.0


def backend_pid(client: QueueClient) -> int:
    return int(client.cursor.connection.info.backend_pid)


def commit(client: QueueClient) -> None:
    client.cursor.connection.commit()


def rollback(client: QueueClient) -> None:
    client.cursor.connection.rollback()


def forbid_waiting(client: QueueClient) -> None:
    """Make every later statement of this session fail instead of waiting on a lock: the lock
    holders in these tests stay open until the test itself ends them, so any wait would hit
    the timeout and raise LockNotAvailable."""
    client.cursor.execute("SET lock_timeout = '2s'")
    commit(client)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    """Threads for calls that must run beside the test's own: a call that blocks, or many
    clients started together."""
    with ThreadPoolExecutor(max_workers=16) as pool:
        yield pool


@pytest.fixture
def monitor(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """An autocommit connection that only watches the others' locks."""
    return connect(autocommit=True)


WaitUntilBlocked = Callable[[QueueClient, QueueClient, "Future[Any]"], None]


@pytest.fixture
def wait_until_blocked(monitor: psycopg.Connection) -> WaitUntilBlocked:
    """Return once ``waiter``'s backend waits on a lock ``holder``'s backend holds (see
    :func:`tests.signals.wait_until_blocked`); fail after BLOCK_TIMEOUT seconds, or at once if
    the waiting call (``pending``) returned instead of blocking."""

    def _wait(waiter: QueueClient, holder: QueueClient, pending: Future[Any]) -> None:
        signals.wait_until_blocked(
            monitor, backend_pid(waiter), backend_pid(holder), pending, BLOCK_TIMEOUT
        )

    return _wait


@pytest.fixture
def database(fresh_database: str) -> str:
    """A database of this test's own, with the queue installed."""
    with psycopg.connect(fresh_database) as connection:
        install(connection)
    on_citus.distribute(fresh_database)
    one_namespace_per_call.apply_policies(fresh_database)
    return fresh_database


CollectPlans = Callable[[psycopg.Connection], list[str]]


@pytest.fixture
def collect_plans() -> CollectPlans:
    """See :func:`start_collecting_plans`."""
    return start_collecting_plans


def start_collecting_plans(connection: psycopg.Connection) -> list[str]:
    """From now on, the plan of every statement ``connection`` runs, nested ones included (the
    statements inside the queue's functions), is appended to the returned list (auto_explain,
    as notices; the session must be a superuser's)."""
    plans: list[str] = []
    connection.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    connection.execute("LOAD 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_level = notice",
        "client_min_messages = notice",
    ):
        connection.execute(f"SET {setting}")
    return plans
