"""WorkListener and AsyncWorkListener: woken by the commit of a push, never by a rollback,
never by another queue; the timeout is only a fallback poll. Every test runs against both."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import AsyncWorkListener, QueueClient, WorkListener
from tests.signals import query_start, wait_until, wait_until_idle_after

Q = "emails"


class ListenerSide:
    """A listener of either kind on a connection the test knows, driven synchronously."""

    def __init__(
        self,
        listener: WorkListener | AsyncWorkListener,
        backend_pid: int,
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.listener = listener
        self.backend_pid = backend_pid
        self._loop = loop

    def _await(self, value: Any) -> Any:
        if self._loop is None:
            return value
        return self._loop.run_until_complete(value)

    def listen(self) -> None:
        self._await(self.listener.listen())

    def wait_for_work(self, timeout: float) -> bool:
        woken: bool = self._await(self.listener.wait_for_work(timeout=timeout))
        return woken

    def poll(self) -> bool:
        work: bool = self._await(self.listener.poll())
        return work


OpenListener = Callable[..., ListenerSide]


@pytest.fixture(params=["sync", "async"])
def listener_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def open_listener(
    listener_kind: str,
    dsn: str,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
) -> Iterator[OpenListener]:
    """Open a listener of this test's kind on an autocommit connection of its own."""
    loop = asyncio.new_event_loop() if listener_kind == "async" else None
    async_connections: list[psycopg.AsyncConnection[Any]] = []

    def _open(
        queues: list[str] | None = None,
        *,
        on_namespace: str | None = None,
        on_cancel: Callable[[int], None] | None = None,
    ) -> ListenerSide:
        names = queues or [Q]
        where = on_namespace or namespace
        if loop is None:
            connection = connect(autocommit=True)
            listener: WorkListener | AsyncWorkListener = WorkListener(
                connection, where, names, on_cancel=on_cancel
            )
            return ListenerSide(listener, connection.info.backend_pid, None)
        async_connection = loop.run_until_complete(
            psycopg.AsyncConnection.connect(dsn, autocommit=True)
        )
        async_connections.append(async_connection)
        listener = AsyncWorkListener(async_connection, where, names, on_cancel=on_cancel)
        return ListenerSide(listener, async_connection.info.backend_pid, loop)

    yield _open
    if loop is not None:
        for async_connection in async_connections:
            loop.run_until_complete(async_connection.close())
        loop.close()


@pytest.fixture
def producer(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """A client that pushes from a connection of its own (commits are the test's to make)."""
    return QueueClient(connect().cursor(), namespace=namespace)


@pytest.fixture
def observer(connect: Callable[..., psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    """An autocommit connection for looking at the server (pg_stat_activity, raw LISTEN)."""
    return connect(autocommit=True)


def wait_until_listening(observer: psycopg.Connection[Any], pid: int, before: datetime) -> None:
    """Wait until the listener's session has run a new due-job check (one that started after
    ``before``) and is idle: from then on it waits for a notification, so anything that wakes
    it before its timeout is a notification."""
    wait_until_idle_after(observer, pid, "next_run_at", before)


def listen_raw(observer: psycopg.Connection[Any], namespace: str, queue: str) -> str:
    """LISTEN on the queue's channel and request a wake-up, as a waiting worker does."""
    [(channel,)] = observer.execute(
        "SELECT postkit_queue.channel(%s, %s)", (namespace, queue)
    ).fetchall()
    observer.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    request_wakeup(observer, namespace, queue)
    return str(channel)


def request_wakeup(observer: psycopg.Connection[Any], namespace: str, queue: str) -> bool:
    [(made,)] = observer.execute(
        "SELECT postkit_queue.request_wakeup(%s, ARRAY[%s])", (namespace, queue)
    ).fetchall()
    return bool(made)


def test_a_committed_push_wakes_a_waiting_listener_before_its_fallback_poll(
    open_listener: OpenListener, producer: QueueClient, observer: psycopg.Connection[Any]
) -> None:
    listener = open_listener()
    listener.listen()

    def wait_into(results: list[bool]) -> None:
        results.append(listener.wait_for_work(timeout=30))

    for round_ in range(2):  # woken again after a first wake-up: no notification is lost
        results: list[bool] = []
        started = time.monotonic()
        before = query_start(observer, listener.backend_pid)
        thread = threading.Thread(target=wait_into, args=(results,))
        thread.start()
        wait_until_listening(observer, listener.backend_pid, before)

        producer.push(Q, {"n": round_})
        producer.cursor.connection.commit()
        thread.join(timeout=10)

        assert not thread.is_alive(), f"round {round_}: the committed push did not wake it"
        assert results == [True]
        assert time.monotonic() - started < 30, "woken by the notification, not the timeout"
        # Claim the job, so that the next round finds nothing due and must be notified.
        assert producer.pull(Q) is not None
        producer.cursor.connection.commit()


def test_connect_opens_a_dedicated_connection_that_the_context_manager_closes(
    listener_kind: str, dsn: str, namespace: str, producer: QueueClient
) -> None:
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()

    if listener_kind == "sync":
        with WorkListener.connect(dsn, namespace, [Q]) as listener:
            assert listener.wait_for_work(timeout=30) is True
        connection: Any = listener._connection
    else:

        async def use() -> Any:
            async with await AsyncWorkListener.connect(dsn, namespace, [Q]) as listener:
                assert await listener.wait_for_work(timeout=30) is True
            return listener._connection

        connection = asyncio.run(use())
    assert connection.autocommit
    assert connection.closed


def test_a_rolled_back_push_does_not_wake_the_listener(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    listener = open_listener()
    listener.listen()
    producer.push(Q, {"n": 1})
    producer.cursor.connection.rollback()
    assert listener.wait_for_work(timeout=0.5) is False


def test_returns_at_once_when_a_job_is_already_due(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()
    # Opened after the push: no notification is waiting, the due job alone answers.
    listener = open_listener()
    started = time.monotonic()
    assert listener.wait_for_work(timeout=30) is True
    assert time.monotonic() - started < 30


def test_notifications_counts_the_wake_ups_a_notification_made_not_those_of_a_due_job(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()
    listener = open_listener()  # opened after the push: its notification is not waiting
    assert listener.wait_for_work(timeout=30) is True
    assert listener.listener.notifications == 0, "the due job woke it, not a notification"
    assert producer.pull(Q) is not None
    producer.cursor.connection.commit()

    producer.push(Q, {"n": 2}, delay=3600)  # it notifies, and is due in an hour
    producer.cursor.connection.commit()

    assert listener.wait_for_work(timeout=30) is True
    assert listener.listener.notifications == 1


def test_a_delayed_job_wakes_the_listener_when_it_falls_due_and_not_before(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    pushed_at = time.monotonic()
    producer.push(Q, {"n": 1}, delay=1.0)
    producer.cursor.connection.commit()
    assert producer.pull(Q) is None, "the delayed job is not due yet"
    producer.cursor.connection.commit()

    # Opened after the push, so its notification is not waiting: only the due time wakes it.
    listener = open_listener()
    assert listener.wait_for_work(timeout=30) is True
    elapsed = time.monotonic() - pushed_at
    assert 0.9 <= elapsed < 30, f"woke {elapsed:.2f}s after the push"
    job = producer.pull(Q)
    assert job is not None, "the job is due when the listener wakes"
    producer.cursor.connection.commit()


def test_a_paused_queue_with_a_due_job_lets_its_listener_sleep(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    producer.push(Q, {"n": 1})
    producer.pause_queue(Q)
    producer.cursor.connection.commit()

    # pull hands out nothing from a paused queue, so "due now" would only spin the worker.
    listener = open_listener()
    assert listener.wait_for_work(timeout=0.3) is False


def test_resuming_a_paused_queue_wakes_its_sleeping_listener(
    open_listener: OpenListener, producer: QueueClient, observer: psycopg.Connection[Any]
) -> None:
    producer.push(Q, {"n": 1})
    producer.pause_queue(Q)
    producer.cursor.connection.commit()
    listener = open_listener()
    listener.listen()
    before = query_start(observer, listener.backend_pid)

    def resume_once_the_listener_waits() -> None:
        wait_until_listening(observer, listener.backend_pid, before)
        producer.resume_queue(Q)
        producer.cursor.connection.commit()

    resumer = threading.Thread(target=resume_once_the_listener_waits)
    resumer.start()
    started = time.monotonic()
    assert listener.wait_for_work(timeout=30) is True
    assert time.monotonic() - started < 30
    resumer.join()


def test_one_transaction_of_pushes_sends_one_notification(
    producer: QueueClient, observer: psycopg.Connection[Any], namespace: str
) -> None:
    channel = listen_raw(observer, namespace, Q)
    for n in range(100):
        producer.push(Q, {"n": n})
    producer.cursor.connection.commit()

    notes = list(observer.notifies(timeout=1))
    assert [note.channel for note in notes] == [channel]


def test_notify_off_sends_nothing_but_the_fallback_finds_the_job(
    open_listener: OpenListener,
    producer: QueueClient,
    observer: psycopg.Connection[Any],
    namespace: str,
) -> None:
    listen_raw(observer, namespace, Q)
    listener = open_listener()
    listener.listen()
    producer.cursor.execute("SET postkit_queue.notify = off")
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()

    assert list(observer.notifies(timeout=0.5)) == [], "no notification with notify = off"
    started = time.monotonic()
    assert listener.wait_for_work(timeout=30) is True, "the due job is found without a notify"
    assert time.monotonic() - started < 30


def test_listeners_of_other_queues_and_namespaces_are_not_woken(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    other_queue = open_listener(["sms"])
    other_namespace = open_listener([Q], on_namespace="another-namespace")
    own = open_listener([Q, "sms"])
    for listener in (other_queue, other_namespace, own):
        listener.listen()

    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()

    assert own.wait_for_work(timeout=30) is True
    assert other_queue.wait_for_work(timeout=0.5) is False
    assert other_namespace.wait_for_work(timeout=0.5) is False


# Wake-up requests: a push notifies only a worker that waits, and only once per request.


def test_a_push_notifies_nobody_while_no_worker_has_requested_a_wakeup(
    producer: QueueClient, observer: psycopg.Connection[Any], namespace: str
) -> None:
    [(channel,)] = observer.execute(
        "SELECT postkit_queue.channel(%s, %s)", (namespace, Q)
    ).fetchall()
    observer.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()

    assert list(observer.notifies(timeout=0.5)) == []


def test_only_the_push_that_takes_the_request_notifies(
    producer: QueueClient, observer: psycopg.Connection[Any], namespace: str
) -> None:
    channel = listen_raw(observer, namespace, Q)
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()
    producer.push(Q, {"n": 2})
    producer.cursor.connection.commit()

    assert [note.channel for note in observer.notifies(timeout=1)] == [channel]


def test_a_request_taken_by_a_rolled_back_push_stands_for_the_next_push(
    producer: QueueClient, observer: psycopg.Connection[Any], namespace: str
) -> None:
    channel = listen_raw(observer, namespace, Q)
    producer.push(Q, {"n": 1})
    producer.cursor.connection.rollback()
    assert list(observer.notifies(timeout=0.3)) == []

    producer.push(Q, {"n": 2})
    producer.cursor.connection.commit()
    assert [note.channel for note in observer.notifies(timeout=1)] == [channel]


def test_a_push_never_waits_for_the_transaction_that_took_the_request(
    producer: QueueClient,
    observer: psycopg.Connection[Any],
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    channel = listen_raw(observer, namespace, Q)
    producer.push(Q, {"n": 1})  # takes the request; its transaction stays open
    second = QueueClient(connect().cursor(), namespace=namespace)
    done = threading.Event()

    def push_and_commit() -> None:
        second.push(Q, {"n": 2})
        second.cursor.connection.commit()
        done.set()

    thread = threading.Thread(target=push_and_commit)
    thread.start()
    thread.join(timeout=10)
    assert done.is_set(), "the second push waited for the first one's transaction"
    assert list(observer.notifies(timeout=0.3)) == [], "the taker alone notifies"

    producer.cursor.connection.commit()
    assert [note.channel for note in observer.notifies(timeout=1)] == [channel]


def test_waiting_again_before_any_push_makes_no_new_request(
    observer: psycopg.Connection[Any], namespace: str
) -> None:
    assert request_wakeup(observer, namespace, Q) is True
    assert request_wakeup(observer, namespace, Q) is False


def test_a_job_pushed_before_the_request_and_committed_after_the_look_is_found_soon(
    open_listener: OpenListener, producer: QueueClient, observer: psycopg.Connection[Any]
) -> None:
    """The push reads no request (none is made yet) and notifies nobody; the listener looks,
    finds nothing committed, and waits: its next look, a few milliseconds on, finds the job."""
    listener = open_listener()
    listener.listen()
    producer.push(Q, {"n": 1})  # before the request; committed only once the listener waits
    results: list[bool] = []
    before = query_start(observer, listener.backend_pid)
    thread = threading.Thread(target=lambda: results.append(listener.wait_for_work(timeout=60)))
    started = time.monotonic()
    thread.start()
    wait_until_listening(observer, listener.backend_pid, before)
    producer.cursor.connection.commit()
    thread.join(timeout=30)

    assert results == [True]
    assert time.monotonic() - started < 30, "found by a look, not by the 60 s timeout"
    assert listener.listener.notifications == 0, "no notification announced it"


def test_a_queue_whose_limits_hold_jobs_back_notifies_without_a_request(
    producer: QueueClient, observer: psycopg.Connection[Any], namespace: str
) -> None:
    """Its workers' look leaves its ready jobs out (the limit may hold them back), so they
    depend on the notifications sent while they were busy, as before requests."""
    producer.configure_queue(Q, concurrency=1)
    producer.cursor.connection.commit()
    [(channel,)] = observer.execute(
        "SELECT postkit_queue.channel(%s, %s)", (namespace, Q)
    ).fetchall()
    observer.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    producer.push(Q, {"n": 1})
    producer.cursor.connection.commit()

    assert [note.channel for note in observer.notifies(timeout=1)] == [channel]


def test_a_running_jobs_cancel_is_told_to_on_cancel_and_is_not_work(
    open_listener: OpenListener, producer: QueueClient
) -> None:
    cancelled: list[int] = []
    side = open_listener(on_cancel=cancelled.append)
    side.listen()
    job_id = producer.push(Q, {})
    producer.cursor.connection.commit()
    job = producer.pull(Q, worker_id="w1")
    assert job is not None and job.id == job_id
    producer.cursor.connection.commit()

    assert producer.cancel(job_id)
    producer.cursor.connection.commit()

    polled: list[bool] = []  # the notice reaches the listener's socket a moment after commit
    wait_until(lambda: polled.append(side.poll()) or cancelled, "the cancel's notice")
    assert cancelled == [job_id]
    assert not any(polled)
    assert side.wait_for_work(timeout=0.3) is False  # the notice was read, and is not work
