"""Cancelling a running job: the worker learns of it at once from a notification (at the
job's next heartbeat if the notification is lost), gives the job's slot back, tells its
handler (is_cancelled; an async handler's task is cancelled after its grace), and a
transactional handler's writes roll back with its stale ack."""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, is_cancelled
from tests.signals import wait_until
from tests.worker.conftest import StartWorker

CLAIM = 0.6
"""Each claim lasts 0.6 s, so the heartbeat asks about it every 0.2 s."""

LONG_CLAIM = 120.0
"""Each claim lasts 120 s, so the heartbeat asks about it after 40 s: a worker that learns of
a cancel within the tests' 15 s learned it from the notification."""


def running(client: QueueClient, queue: str) -> int:
    job_id = client.push(queue, {})
    assert job_id is not None
    wait_until(
        lambda: (job := client.get_job(job_id)) is not None and job.state == "running",
        f"job {job_id} to run",
    )
    return job_id


def test_a_cancelled_handler_is_told_and_its_slot_goes_to_the_next_job(
    start_worker: StartWorker, client: QueueClient
) -> None:
    release = threading.Event()
    events: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    def stubborn(job: Job) -> None:
        wait_until(is_cancelled, "the handler to be told")
        events.put(("told", job.id))
        release.wait(15)  # it runs on: its slot must not wait for it

    handlers.add("long", stubborn)
    handlers.add("short", lambda job: events.put(("ran", job.id)))
    start_worker(handlers, concurrency=1, visibility_timeout=CLAIM)
    try:
        long_id = running(client, "long")
        assert client.cancel(long_id)

        assert events.get(timeout=15) == ("told", long_id)
        short_id = client.push("short", {})
        assert events.get(timeout=15) == ("ran", short_id)
    finally:
        release.set()
    assert client.result(long_id).state == "cancelled"


def test_a_worker_with_every_slot_busy_learns_of_a_cancel_from_its_notification(
    start_worker: StartWorker, client: QueueClient
) -> None:
    told: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    release = threading.Event()
    handlers = Handlers()

    def long(job: Job) -> None:
        while not is_cancelled() and not release.is_set():
            release.wait(0.05)
        if is_cancelled():
            told.put(job.id)

    handlers.add("long", long)
    start_worker(handlers, concurrency=1, prefetch=0, visibility_timeout=LONG_CLAIM)
    try:
        job_id = running(client, "long")

        assert client.cancel(job_id)

        assert told.get(timeout=15) == job_id
    finally:
        release.set()


def test_a_forged_cancel_notification_changes_nothing(
    start_worker: StartWorker, client: QueueClient, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    """The notification is a hint: the worker asks the database (its heartbeat's extend), which
    says the claim is still its own, so the handler runs on and its job completes."""
    release = threading.Event()
    ended: stdlib_queue.SimpleQueue[bool] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    def long(job: Job) -> None:
        release.wait(15)
        ended.put(is_cancelled())

    handlers.add("long", long)
    client.configure_queue("long", retain_results=3600)
    start_worker(handlers, concurrency=1, visibility_timeout=LONG_CLAIM)
    job_id = running(client, "long")
    forger = connect(autocommit=True)
    (channel,) = forger.execute(
        "SELECT postkit_queue.channel(%s, 'long')", (client.namespace,)
    ).fetchone()
    # The heartbeat's extend, once the forged hint arrives, moves visible_until.
    before = client.get_job(job_id)
    assert before is not None

    forger.execute("SELECT pg_notify(%s, %s)", (channel, f"cancelled {job_id}"))

    wait_until(
        lambda: (
            (job := client.get_job(job_id)) is not None
            and job.visible_until != before.visible_until
        ),
        "the worker to check the claim",
    )
    release.set()
    assert ended.get(timeout=15) is False
    wait_until(lambda: client.result(job_id).state == "completed", "the job to complete")


def test_a_cancelled_async_handler_may_stop_by_itself_within_its_grace(
    start_worker: StartWorker, client: QueueClient
) -> None:
    events: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    async def polite(job: Job) -> None:
        try:
            while not is_cancelled():
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # cleaning up, within the grace
            events.put("returned")
        except asyncio.CancelledError:
            events.put("cancelled")
            raise

    handlers.add("long", polite)
    start_worker(handlers, visibility_timeout=CLAIM, cancel_grace=10)
    job_id = running(client, "long")

    assert client.cancel(job_id)

    assert events.get(timeout=15) == "returned"


def test_a_cancelled_async_handler_is_cancelled_after_its_grace(
    start_worker: StartWorker, client: QueueClient
) -> None:
    events: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    async def long(job: Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.put(("cancelled", is_cancelled()))
            raise

    handlers.add("long", long)
    start_worker(handlers, visibility_timeout=CLAIM, cancel_grace=0.2)
    job_id = running(client, "long")

    assert client.cancel(job_id)

    assert events.get(timeout=15) == ("cancelled", True)


def test_a_cancelled_transactional_handlers_writes_roll_back(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
) -> None:
    admin = connect(autocommit=True)
    admin.execute("CREATE TABLE IF NOT EXISTS cancel_writes (job_id bigint)")
    handlers = Handlers()

    def write_then_wait(job: Job, cursor: Any) -> None:
        cursor.execute("INSERT INTO cancel_writes VALUES (%s)", (job.id,))
        wait_until(is_cancelled, "the handler to be told")

    handlers.add("writes", write_then_wait, transactional=True)
    start_worker(handlers, visibility_timeout=CLAIM)
    job_id = running(client, "writes")

    assert client.cancel(job_id)

    wait_until(lambda: client.result(job_id).state == "cancelled", "the cancel")
    wait_until(
        lambda: (
            admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'idle in transaction'"
                " AND query LIKE '%%cancel_writes%%'"
            ).fetchone()
            == (0,)
        ),
        "the handler's transaction to end",
    )
    assert admin.execute(
        "SELECT count(*) FROM cancel_writes WHERE job_id = %s", (job_id,)
    ).fetchone() == (0,)
