"""Cancelling a running job: the worker learns of it at the job's next heartbeat, gives the
job's slot back, tells its handler (is_cancelled, an async handler's task cancelled), and a
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


def test_a_cancelled_async_handler_is_cancelled(
    start_worker: StartWorker, client: QueueClient
) -> None:
    events: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    async def long(job: Job) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.put("cancelled")
            raise

    handlers.add("long", long)
    start_worker(handlers, visibility_timeout=CLAIM)
    job_id = running(client, "long")

    assert client.cancel(job_id)

    assert events.get(timeout=15) == "cancelled"


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
