"""A queue that a concurrency or group limit holds back wakes one waiting worker per freed slot,
the longest waiting, on its listener's own channel (postkit_queue.wait_for_slot, notify); with
none waiting, it notifies the queue's channel, which busy workers read when they next wait.

Each "listener" here is a real autocommit connection that LISTENs on its wake channel
(``postkit_wake_<pid>``, as WorkListener's) and on the queue's channel, and the test reads which
of them a commit notified.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import QueueClient, WorkListener
from tests.signals import wait_until

Q = "limited"


class Listener:
    """A connection that waits like a worker's listener, by the SQL calls alone."""

    def __init__(self, connection: psycopg.Connection[Any], namespace: str) -> None:
        self.connection = connection
        self.namespace = namespace
        self.pid = connection.info.backend_pid
        self.wake_channel = f"postkit_wake_{self.pid}"
        (channel,) = self._one("SELECT postkit_queue.channel(%s, %s)", (namespace, Q))
        self.queue_channel = str(channel)
        for name in (self.wake_channel, self.queue_channel):
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(name)))

    def _one(self, statement: str, params: tuple[Any, ...]) -> tuple[Any, ...]:
        row = self.connection.execute(statement, params).fetchone()  # type: ignore[arg-type]
        assert row is not None
        return tuple(row)

    def wait_for_slot(self) -> bool:
        (waiting,) = self._one(
            "SELECT postkit_queue.wait_for_slot(%s, ARRAY[%s])", (self.namespace, Q)
        )
        return bool(waiting)

    def stop_waiting(self) -> int:
        (stopped,) = self._one("SELECT postkit_queue.stop_waiting(%s)", (self.namespace,))
        return int(stopped)

    def notified_on(self) -> list[str]:
        """The channels of the notifications that arrived, without waiting for more."""
        return [notify.channel for notify in self.connection.notifies(timeout=0.2)]


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client: each call commits at once."""
    queue = QueueClient(connect(autocommit=True).cursor(), namespace=namespace)
    queue.configure_queue(Q, concurrency=1)
    return queue


@pytest.fixture
def listener(
    connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> Callable[[], Listener]:
    return lambda: Listener(connect(autocommit=True), namespace)


def waiting(client: QueueClient, namespace: str) -> list[int]:
    """The backends waiting for a slot of the queue, the longest waiting first."""
    rows = client.cursor.execute(
        "SELECT pid FROM postkit_queue.slot_waiters WHERE namespace = %s AND queue = %s"
        " ORDER BY since, pid",
        (namespace, Q),
    ).fetchall()
    return [int(pid) for (pid,) in rows]


def run_one_job(client: QueueClient) -> None:
    """Push a job, claim it and acknowledge it: its ack frees the queue's one slot."""
    client.push(Q, {})
    (job,) = client.pull_batch(Q, worker_id="w", limit=1)
    assert client.ack(job)


def test_a_freed_slot_wakes_the_longest_waiting_listener_alone(
    client: QueueClient, listener: Callable[[], Listener], namespace: str
) -> None:
    first, second = listener(), listener()
    assert first.wait_for_slot() and second.wait_for_slot()
    client.push(Q, {})
    first.notified_on(), second.notified_on()  # the push woke the first; read it

    (job,) = client.pull_batch(Q, worker_id="w", limit=1)
    assert first.wait_for_slot()  # back in line, behind the second
    assert client.ack(job)

    assert second.notified_on() == [second.wake_channel]
    assert first.notified_on() == []
    assert waiting(client, namespace) == [first.pid]


def test_with_no_worker_waiting_a_freed_slot_notifies_the_queues_channel(
    client: QueueClient, listener: Callable[[], Listener]
) -> None:
    busy = listener()  # listens, as a busy worker does, but waits for no slot
    run_one_job(client)
    assert set(busy.notified_on()) == {busy.queue_channel}


def test_a_waiter_whose_backend_is_gone_is_passed_over_and_forgotten(
    client: QueueClient, listener: Callable[[], Listener], namespace: str
) -> None:
    gone, alive = listener(), listener()
    assert gone.wait_for_slot() and alive.wait_for_slot()
    gone_pid = gone.pid
    gone.connection.close()
    wait_until(
        lambda: (
            not client.cursor.execute(
                "SELECT FROM pg_catalog.pg_stat_get_activity(%s)", (gone_pid,)
            ).fetchall()
        ),
        "the closed connection's backend to exit",
    )

    client.push(Q, {})

    assert alive.notified_on() == [alive.wake_channel]
    assert waiting(client, namespace) == []


def test_a_batch_of_three_jobs_wakes_three_waiting_listeners(
    client: QueueClient, listener: Callable[[], Listener], namespace: str
) -> None:
    listeners = [listener() for _ in range(4)]
    for each in listeners:
        assert each.wait_for_slot()

    client.push_batch(Q, [{}] * 3)

    woken = [each for each in listeners if each.notified_on() == [each.wake_channel]]
    assert woken == listeners[:3]
    assert waiting(client, namespace) == [listeners[3].pid]


def test_a_listener_that_stops_waiting_is_not_woken(
    client: QueueClient, listener: Callable[[], Listener], namespace: str
) -> None:
    stopped = listener()
    assert stopped.wait_for_slot()
    assert stopped.stop_waiting() == 1
    assert waiting(client, namespace) == []

    run_one_job(client)

    assert stopped.wake_channel not in stopped.notified_on()


def test_a_limit_raised_wakes_every_waiting_worker(
    client: QueueClient, listener: Callable[[], Listener]
) -> None:
    listeners = [listener() for _ in range(3)]
    for each in listeners:
        assert each.wait_for_slot()

    client.configure_queue(Q, concurrency=3)

    for each in listeners:
        assert each.notified_on() == [each.queue_channel]


def test_a_queue_without_a_limit_keeps_no_waiters(
    client: QueueClient, listener: Callable[[], Listener], namespace: str
) -> None:
    client.configure_queue("open", concurrency=None)
    free = listener()
    row = free.connection.execute(
        "SELECT postkit_queue.wait_for_slot(%s, ARRAY['open'])", (namespace,)
    ).fetchone()
    assert row == (False,)
    assert waiting(client, namespace) == []


def test_a_work_listener_woken_by_a_due_job_stops_waiting_for_the_slot(
    client: QueueClient, connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> None:
    """A wake-up for another reason: the slot must wake a worker that still waits."""
    client.push("other", {})
    work = WorkListener(connect(autocommit=True), namespace, [Q, "other"])

    assert work.wait_for_work(timeout=5.0)

    assert waiting(client, namespace) == []


def test_a_work_listener_handed_a_slot_is_woken_on_its_wake_channel_alone(
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    listener: Callable[[], Listener],
    namespace: str,
) -> None:
    client.push(Q, {})
    (job,) = client.pull_batch(Q, worker_id="w", limit=1)
    busy = listener()  # listens on the queue's channel, waits for no slot
    work = WorkListener(connect(autocommit=True), namespace, [Q])
    with ThreadPoolExecutor(1) as pool:
        woken = pool.submit(work.wait_for_work, 30.0)
        wait_until(
            lambda: waiting(client, namespace) == [work.connection.info.backend_pid],
            "the work listener to wait for the slot",
        )
        started = time.monotonic()
        assert client.ack(job)
        assert woken.result(timeout=10)
    assert time.monotonic() - started < 10
    assert work.notifications == 1
    assert busy.notified_on() == []
