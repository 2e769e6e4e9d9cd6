"""Backpressure (check_room, helpers.sql): a queue's ``max_pending`` refuses a push that would
make it hold more pending jobs, so that a runaway producer meets resistance before the disk
does. The refusal is the SQL module's, raised inside the caller's transaction: a savepoint
around the push keeps the rest of that transaction."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from postkit import errors
from postkit.queue import QueueClient
from tests.queue.conftest import commit

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
