"""``push(..., run_at=datetime)`` and ``push_batch(..., run_at=...)``: an absolute time beside
``delay``, turned into a delay on the queue's clock by the push's own statement."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import psycopg
import psycopg2
import pytest

from postkit.errors import InvalidDurationError, InvalidRunAtError
from postkit.queue import AsyncQueueClient, Job, QueueClient

Q = "reminders"
Shift = Callable[[QueueClient, float], None]


def clock(client: QueueClient) -> datetime:
    return client.clock()


def job(client: QueueClient, job_id: int | None) -> Job:
    assert job_id is not None
    found = client.get_job(job_id)
    assert found is not None
    return found


def test_a_job_pushed_with_run_at_runs_at_exactly_that_time(queue: QueueClient) -> None:
    run_at = clock(queue) + timedelta(hours=2, microseconds=123_457)

    pushed = job(queue, queue.push(Q, {"n": 1}, run_at=run_at))

    assert pushed.run_at == run_at
    assert queue.pull(Q) is None


def test_run_at_is_exact_across_a_daylight_saving_change_in_the_sessions_time_zone(
    queue: QueueClient,
) -> None:
    """The run_at is months ahead, at a different UTC offset in Berlin than now: a delay of
    that many days, added in that time zone, would land an hour off. It is chosen a day or more
    past the change, so that the wrong sum never falls in the hour the change skips (which
    PostgreSQL moves forward by that very hour, to the right answer)."""
    queue.cursor.execute("SET TIME ZONE 'Europe/Berlin'")
    now = clock(queue).astimezone(timezone.utc)  # in UTC, a timedelta adds elapsed time
    berlin = ZoneInfo("Europe/Berlin")
    run_at = next(
        now + timedelta(days=days, seconds=1)
        for days in range(100, 300)
        if (now + timedelta(days=days - 1)).astimezone(berlin).utcoffset()
        != now.astimezone(berlin).utcoffset()
    )

    assert job(queue, queue.push(Q, {"n": 1}, run_at=run_at)).run_at == run_at
    naive_sum = queue.cursor.execute(
        "SELECT %s::timestamptz + (%s::timestamptz - %s::timestamptz)", (now, run_at, now)
    ).fetchone()[0]
    assert naive_sum != run_at, "the test crosses a change that a delay in days gets wrong"


def test_run_at_follows_the_queues_clock_not_the_machines(
    queue: QueueClient, shift_clock: Shift
) -> None:
    shift_clock(queue, 3600)  # the database's clock is an hour ahead of this machine's
    by_the_machine = datetime.now(timezone.utc) + timedelta(minutes=30)
    by_the_queue = clock(queue) + timedelta(minutes=30)

    queue.push(Q, {"n": "machine"}, run_at=by_the_machine)
    later = job(queue, queue.push(Q, {"n": "queue"}, run_at=by_the_queue))

    pulled = queue.pull(Q)
    assert pulled is not None and pulled.payload == {"n": "machine"}, (
        "half an hour ahead of the machine is past for the queue: ready now"
    )
    assert later.run_at == by_the_queue
    assert queue.pull(Q) is None


def test_a_run_at_already_past_makes_the_job_ready_now(queue: QueueClient) -> None:
    before = clock(queue)

    pushed = job(queue, queue.push(Q, {"n": 1}, run_at=datetime(2000, 1, 1, tzinfo=timezone.utc)))

    assert pushed.run_at is not None and pushed.run_at >= before
    assert queue.pull(Q) is not None


def test_push_batch_gives_every_job_the_run_at(queue: QueueClient) -> None:
    run_at = clock(queue) + timedelta(minutes=5)

    ids = queue.push_batch(Q, [{"n": 1}, {"n": 2}], run_at=run_at)

    assert [job(queue, job_id).run_at for job_id in ids] == [run_at, run_at]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware, got the naive"),
        (
            {"run_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "delay": 5},
            "give delay or run_at, not both",
        ),
        ({"run_at": "2030-01-01T00:00:00Z"}, "run_at must be a datetime, got str"),
        (
            {"run_at": datetime.now(timezone.utc) + timedelta(days=3651)},
            "is more than 3650 days ahead",
        ),
    ],
    ids=["naive", "with-delay", "text", "too-far"],
)
@pytest.mark.parametrize("call", ["push", "push_batch"])
def test_a_bad_run_at_raises_before_any_sql_and_leaves_the_transaction_intact(
    queue: QueueClient, arguments: dict[str, Any], message: str, call: str
) -> None:
    with pytest.raises(InvalidRunAtError, match=message) as raised:
        if call == "push":
            queue.push(Q, {"n": 1}, **arguments)
        else:
            queue.push_batch(Q, [{"n": 1}], **arguments)

    assert isinstance(raised.value, InvalidDurationError)
    assert queue.push(Q, {"n": 2}) is not None, "the transaction is not aborted"


def test_the_async_client_pushes_at_run_at(dsn: str, namespace: str) -> None:
    async def push() -> tuple[datetime, Job | None]:
        async with await psycopg.AsyncConnection.connect(dsn) as connection:
            client = AsyncQueueClient(connection.cursor(), namespace=namespace)
            run_at = await client.clock() + timedelta(minutes=7)
            job_id = await client.push(Q, {"n": 1}, run_at=run_at)
            [batch_id] = await client.push_batch(Q, [{"n": 2}], run_at=run_at)
            assert job_id is not None and batch_id is not None
            jobs = [await client.get_job(job_id), await client.get_job(batch_id)]
            assert [found.run_at for found in jobs if found] == [run_at, run_at]
            return run_at, jobs[0]

    run_at, pushed = asyncio.run(push())
    assert pushed is not None and pushed.run_at == run_at


def test_psycopg2_cursors_push_at_run_at(dsn: str, namespace: str) -> None:
    connection = psycopg2.connect(dsn)
    try:
        client = QueueClient(connection.cursor(), namespace=namespace)
        run_at = client.clock() + timedelta(hours=1, microseconds=5)

        assert job(client, client.push(Q, {"n": 1}, run_at=run_at)).run_at == run_at
    finally:
        connection.close()
