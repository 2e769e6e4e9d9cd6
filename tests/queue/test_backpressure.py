"""Backpressure (check_room, helpers.sql): a queue's ``max_pending`` refuses a push that would
make it hold more pending jobs, so that a runaway producer meets resistance before the disk
does. The refusal is the SQL module's, raised inside the caller's transaction: a savepoint
around the push keeps the rest of that transaction."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import QueueClient
from tests.queue.conftest import backend_pid, commit
from tests.signals import wait_until

Q = "imports"
MakeClient = Callable[..., QueueClient]


@pytest.fixture
def limited(make_client: MakeClient) -> QueueClient:
    """A client in a transaction of its own on queue ``Q``, which holds at most 3 pending jobs."""
    client = make_client()
    assert client.configure_queue(Q, max_pending=3).max_pending == 3
    commit(client)
    return client


def pending(client: QueueClient) -> int:
    (stats,) = client.stats(Q)
    return stats.pending + stats.scheduled


def test_a_push_past_max_pending_is_refused_and_a_savepoint_keeps_the_callers_transaction(
    limited: QueueClient,
) -> None:
    connection = limited.cursor.connection
    assert isinstance(connection, psycopg.Connection)
    for n in range(3):
        limited.push(Q, {"n": n})

    refused = pytest.raises(errors.QueueFullError, match="queue imports is full: 3 pending jobs")
    with refused, connection.transaction():  # a savepoint: the push's refusal rolls back to it
        limited.push(Q, {"n": 3})
    limited.push("other", {"after": "the refusal"})
    commit(limited)

    assert pending(limited) == 3
    assert [job.payload for job in limited.jobs("other", state="pending")] == [
        {"after": "the refusal"}
    ]


def test_a_batch_that_would_overflow_is_refused_whole(limited: QueueClient) -> None:
    limited.push_batch(Q, [{"n": n} for n in range(2)])
    commit(limited)

    with pytest.raises(errors.QueueFullError, match="2 more refused"):
        limited.push_batch(Q, [{"n": n} for n in range(2, 4)])
    limited.cursor.connection.rollback()

    assert pending(limited) == 2


def test_scheduled_jobs_count_and_claimed_ones_make_room(limited: QueueClient) -> None:
    limited.push(Q, {"n": 0}, delay=3600)
    limited.push(Q, {"n": 1})
    limited.push(Q, {"n": 2})
    commit(limited)
    with pytest.raises(errors.QueueFullError):
        limited.push(Q, {"n": 3})
    limited.cursor.connection.rollback()

    assert limited.pull(Q, worker_id="w") is not None  # running: no longer pending
    limited.push(Q, {"n": 3})
    commit(limited)

    assert pending(limited) == 3


def test_max_pending_is_kept_unless_given_and_none_lifts_it(limited: QueueClient) -> None:
    assert limited.configure_queue(Q, max_attempts=5).max_pending == 3
    assert limited.configure_queue(Q, max_pending=None).max_pending is None
    commit(limited)

    limited.push_batch(Q, [{"n": n} for n in range(10)])
    commit(limited)
    assert pending(limited) == 10


@pytest.mark.parametrize("value", [0, 100_001, -1])
def test_a_max_pending_out_of_range_is_refused_before_anything_is_sent(
    limited: QueueClient, value: int
) -> None:
    with pytest.raises(errors.InvalidFlowControlError, match="max_pending"):
        limited.configure_queue(Q, max_pending=value)


def test_stats_shows_the_limit_and_a_queue_at_it_as_full(limited: QueueClient) -> None:
    limited.push_batch(Q, [{}, {}])
    (below,) = limited.stats(Q)
    limited.push(Q, {}, delay=60)
    (at_the_limit,) = limited.stats(Q)
    (unlimited,) = limited.stats("other")

    assert (below.max_pending, below.full) == (3, False)
    assert (at_the_limit.max_pending, at_the_limit.full) == (3, True)
    assert (unlimited.max_pending, unlimited.full) == (None, False)


# --------------------------------------------------------------------------------------------
# Waiting for room: wait_for_room.
# --------------------------------------------------------------------------------------------


def sleeping(monitor: psycopg.Connection[Any], client: QueueClient) -> bool:
    """Whether the client's backend waits in check_room's pause (pg_sleep), for room."""
    row = monitor.execute(
        "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = %s",
        (backend_pid(client),),
    ).fetchone()
    return row is not None and bool(row[0])


def test_a_push_that_waits_for_room_gets_in_once_a_worker_claims(
    limited: QueueClient, make_client: MakeClient, monitor: psycopg.Connection[Any]
) -> None:
    limited.push_batch(Q, [{"n": n} for n in range(3)])
    commit(limited)
    producer = make_client()
    with ThreadPoolExecutor(1) as pool:
        pushed = pool.submit(producer.push, Q, {"n": 3}, wait_for_room=30)
        wait_until(lambda: sleeping(monitor, producer) or pushed.done(), "the push to wait")
        assert not pushed.done()
        assert limited.pull(Q, worker_id="w") is not None
        commit(limited)  # the claim makes room

        job_id = pushed.result(timeout=10)
    commit(producer)

    assert job_id is not None
    assert pending(limited) == 3


def test_a_push_that_finds_no_room_in_its_wait_is_refused_then(limited: QueueClient) -> None:
    limited.push_batch(Q, [{"n": n} for n in range(3)])
    commit(limited)
    started = time.monotonic()

    with pytest.raises(errors.QueueFullError, match=r"after waiting 00:00:00\.2 for room"):
        limited.push(Q, {"n": 3}, wait_for_room=0.2)
    limited.cursor.connection.rollback()

    assert time.monotonic() - started >= 0.2
    assert pending(limited) == 3


def test_a_batch_larger_than_the_limit_is_refused_without_waiting(limited: QueueClient) -> None:
    with pytest.raises(errors.QueueFullError, match="more than it may ever hold"):
        limited.push_batch(Q, [{}] * 4, wait_for_room=3600)
    limited.cursor.connection.rollback()


def test_under_repeatable_read_a_full_queue_refuses_at_once_and_says_why(
    limited: QueueClient,
) -> None:
    limited.push_batch(Q, [{"n": n} for n in range(3)])
    commit(limited)
    limited.cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")

    with pytest.raises(errors.QueueFullError, match="without waiting: under repeatable read"):
        limited.push(Q, {"n": 3}, wait_for_room=3600)
    limited.cursor.connection.rollback()


@pytest.mark.parametrize("value", [-1, 3601, float("nan")])
def test_a_wait_for_room_out_of_range_is_refused_before_anything_is_sent(
    limited: QueueClient, value: float
) -> None:
    with pytest.raises(errors.InvalidDurationError, match="wait_for_room"):
        limited.push(Q, {}, wait_for_room=value)
    with pytest.raises(errors.InvalidDurationError, match="wait_for_room"):
        limited.push_batch(Q, [{}], wait_for_room=value)
