"""Many jobs per round trip: pull_any across queues, push_batch and ack_batch."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.pq import TransactionStatus

from postkit import errors
from postkit.queue import QueueClient
from postkit.queue.records import Job

Shift = Callable[[QueueClient, float], None]

Q = "emails"


def pushed(client: QueueClient, queue: str = Q, payload: Any = None, **kwargs: Any) -> int:
    job_id = client.push(queue, {"n": 0} if payload is None else payload, **kwargs)
    assert job_id is not None
    return job_id


def live_jobs(client: QueueClient, queue: str = Q) -> list[int]:
    client.cursor.execute(
        "SELECT id FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s ORDER BY id",
        (client.namespace, queue),
    )
    return [row[0] for row in client.cursor.fetchall()]


class CountingCursor:
    """A real cursor that counts the statements sent through it."""

    def __init__(self, cursor: psycopg.Cursor[Any]) -> None:
        self._cursor = cursor
        self.executed: list[str] = []

    def execute(self, query: str, params: Any = None) -> Any:
        self.executed.append(query)
        return self._cursor.execute(query, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


# --------------------------------------------------------------------------------------------
# pull_any.
# --------------------------------------------------------------------------------------------


def test_pull_any_empties_the_queues_in_the_order_given(queue: QueueClient) -> None:
    low = [pushed(queue, "low"), pushed(queue, "low")]  # pushed first: lower ids
    high = [pushed(queue, "high"), pushed(queue, "high")]

    claimed = queue.pull_any(["high", "low"], limit=3)

    assert [job.queue for job in claimed] == ["high", "high", "low"]
    assert sorted(job.id for job in claimed[:2]) == high
    assert claimed[2].id in low
    (last,) = queue.pull_any(["high", "low"], limit=3)
    assert last.id in low and last.id != claimed[2].id


def test_pull_any_limit_counts_jobs_across_all_queues(queue: QueueClient) -> None:
    for name in ("a", "b", "c"):
        pushed(queue, name)
        pushed(queue, name)

    claimed = queue.pull_any(["a", "b", "c"], limit=5, worker_id="w")

    assert [job.queue for job in claimed] == ["a", "a", "b", "b", "c"]
    assert all((job.state, job.attempts, job.worker_id) == ("running", 1, "w") for job in claimed)
    assert [job.queue for job in queue.pull_any(["a", "b", "c"], limit=5)] == ["c"]


def test_pull_any_skips_a_paused_queue(queue: QueueClient) -> None:
    pushed(queue, "high")
    low = [pushed(queue, "low"), pushed(queue, "low")]
    queue.pause_queue("high")

    claimed = queue.pull_any(["high", "low"], limit=2)

    assert sorted(job.id for job in claimed) == low


def test_pull_any_with_weights_splits_each_claim_by_weight(queue: QueueClient) -> None:
    for _ in range(6):
        pushed(queue, "a")
        pushed(queue, "b")

    for order in (["a", "b"], ["b", "a"]):
        claimed = queue.pull_any(order, limit=4, weights={"a": 3, "b": 1})
        assert sorted(job.queue for job in claimed) == ["a", "a", "a", "b"]


def test_pull_any_with_weights_puts_either_queue_first_by_weight(
    conn: psycopg.Connection, queue: QueueClient
) -> None:
    for _ in range(400):
        pushed(queue, "a")
        pushed(queue, "b")
    conn.execute("SELECT setseed(0.25)")  # the draws of this session: the same in every run

    taken = [queue.pull_any(["b", "a"], weights={"a": 3})[0].queue for _ in range(400)]

    # 300 expected; the bounds are 3.5 standard deviations of a fair draw (8.7 jobs).
    assert 270 <= taken.count("a") <= 330


def test_pull_any_gives_what_a_queue_leaves_of_its_share_to_the_others(
    queue: QueueClient,
) -> None:
    a = [pushed(queue, "a"), pushed(queue, "a")]
    for _ in range(10):
        pushed(queue, "b")

    claimed = queue.pull_any(["a", "b", "empty"], limit=8, weights={"a": 3, "b": 1, "empty": 4})

    assert sorted(job.queue for job in claimed) == ["a", "a"] + ["b"] * 6
    assert sorted(job.id for job in claimed if job.queue == "a") == a


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"a": 0}, "queue 'a''s weight must be between 1 and 1000, got 0"),
        ({"a": 1001}, "between 1 and 1000, got 1001"),
        ({"a": "3"}, "must be an int, got str"),
        ({"a": True}, "must be an int, got bool"),
        ({"c": 2}, "weights names queue(s) not listed: 'c'"),
        ([3, 1], "weights must map queue names to weights, got list"),
    ],
)
def test_pull_any_refuses_a_bad_weight_before_sending_anything(
    conn: psycopg.Connection, queue: QueueClient, weights: Any, message: str
) -> None:
    with pytest.raises(errors.InvalidFlowControlError, match=re.escape(message)):
        queue.pull_any(["a", "b"], weights=weights)

    assert conn.info.transaction_status == TransactionStatus.IDLE


def test_pull_any_refuses_weights_that_do_not_pair_with_the_queues(
    conn: psycopg.Connection, namespace: str
) -> None:
    with pytest.raises(psycopg.Error, match="one weight per queue") as raised:
        conn.execute(
            "SELECT * FROM postkit_queue.pull_any(%s, '{a,b}', p_weights => '{1}')", [namespace]
        )
    assert raised.value.sqlstate == "PKQ17"


# --------------------------------------------------------------------------------------------
# push_batch.
# --------------------------------------------------------------------------------------------


def test_push_batch_is_one_statement_and_returns_the_ids_in_payload_order(
    conn: psycopg.Connection, namespace: str
) -> None:
    cursor = CountingCursor(conn.cursor())
    client = QueueClient(cursor, namespace=namespace)
    payloads = [{"n": n} for n in range(50)]

    ids = client.push_batch(Q, payloads, priority=2, max_attempts=3)

    assert len(cursor.executed) == 1
    assert len(ids) == 50 and len(set(ids)) == 50
    assert ids == sorted(ids)  # type: ignore[type-var]
    for n, job_id in enumerate(ids):
        assert job_id is not None
        job = client.get_job(job_id)
        assert job is not None
        assert (job.payload, job.priority, job.max_attempts, job.state) == (
            {"n": n},
            2,
            3,
            "pending",
        )


def test_push_batch_with_a_delay_schedules_every_job(queue: QueueClient) -> None:
    ids = queue.push_batch(Q, [1, 2, 3], delay=600)

    assert [job.id for job in queue.jobs(Q, "scheduled")] == ids
    assert queue.pull(Q) is None


def test_push_batch_deduplicates_unique_keys_within_the_batch_and_against_live_jobs(
    queue: QueueClient,
) -> None:
    live = pushed(queue, payload="live", unique_key="k-live")

    ids = queue.push_batch(
        Q,
        ["a", "no key", "a again", "live again", "b", "also no key"],
        unique_keys=["k-a", None, "k-a", "k-live", "k-b", None],
    )

    assert [job_id is None for job_id in ids] == [False, False, True, True, False, False]
    assert live_jobs(queue) == sorted([live, *(job_id for job_id in ids if job_id is not None)])
    payloads = {job.unique_key: job.payload for job in queue.jobs(Q)}
    assert (payloads["k-a"], payloads["k-live"], payloads["k-b"]) == ("a", "live", "b")


def test_push_batch_refuses_a_blank_unique_key_like_push(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    with pytest.raises(errors.InvalidNameError, match="unique_key"):
        queue.push_batch(Q, [1, 2], unique_keys=["fine", "  "])
    assert conn.info.transaction_status == TransactionStatus.IDLE  # refused before sending

    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            "SELECT * FROM postkit_queue.push_batch(%s, %s, '[1, 2]', p_unique_keys => %s)",
            (queue.namespace, Q, ["fine", "  "]),
        )
    assert raised.value.sqlstate == "PKQ01"
    conn.rollback()
    assert live_jobs(queue) == []


def test_listeners_get_one_notification_for_a_batch(
    queue: QueueClient, conn: psycopg.Connection, connect: Callable[..., psycopg.Connection]
) -> None:
    listener = connect(autocommit=True)
    channel = listener.execute(
        "SELECT postkit_queue.channel(%s, %s)", (queue.namespace, Q)
    ).fetchone()
    assert channel is not None
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel[0])))
    listener.execute(
        "SELECT postkit_queue.request_wakeup(%s, ARRAY[%s])", (queue.namespace, Q)
    )  # as a waiting worker does

    queue.push_batch(Q, list(range(100)))
    conn.commit()

    heard = list(listener.notifies(timeout=1))
    assert [n.channel for n in heard] == [channel[0]]


# --------------------------------------------------------------------------------------------
# ack_batch.
# --------------------------------------------------------------------------------------------


def claimed(client: QueueClient, count: int, **kwargs: Any) -> list[Job]:
    jobs = []
    for _ in range(count):
        job = client.pull(Q, **kwargs)
        assert job is not None
        jobs.append(job)
    return jobs


def test_ack_batch_acknowledges_every_held_job(queue: QueueClient) -> None:
    queue.push_batch(Q, [1, 2, 3])
    jobs = claimed(queue, 3, worker_id="w")

    assert queue.ack_batch(jobs, worker_id="w") is True

    assert live_jobs(queue) == []
    assert all(queue.get_job(job.id) is None for job in jobs)
    (stats,) = queue.stats(Q)
    assert stats.completed_last_hour == 3


def test_ack_batch_with_one_stale_claim_acknowledges_none(
    queue: QueueClient, conn: psycopg.Connection, shift_clock: Shift
) -> None:
    queue.push_batch(Q, [1, 2, 3])
    (stale,) = claimed(queue, 1, visibility_timeout=1)
    held = claimed(queue, 2, visibility_timeout=600)
    conn.commit()
    shift_clock(queue, 2)
    assert queue.tick_timeouts() == 1  # rescues the first claim only

    assert queue.ack_batch([*held, stale]) is False

    for job in held:
        still = queue.get_job(job.id)
        assert still is not None
        assert (still.state, still.claim_token) == ("running", job.claim_token)
    rescued = queue.get_job(stale.id)
    assert rescued is not None and rescued.state == "pending"
    assert queue.ack_batch(held) is True
    assert live_jobs(queue) == [stale.id]


def test_ack_batch_of_nothing_is_true(queue: QueueClient) -> None:
    assert queue.ack_batch([]) is True


# --------------------------------------------------------------------------------------------
# ack_many and ack_and_pull: a worker's round trip.
# --------------------------------------------------------------------------------------------


def test_ack_and_pull_acknowledges_the_held_jobs_and_claims_the_next_in_order(
    queue: QueueClient,
) -> None:
    ids = queue.push_batch(Q, [1, 2, 3, 4, 5])
    held = claimed(queue, 2, worker_id="w")

    acked, jobs = queue.ack_and_pull(Q, held, limit=3, worker_id="w")

    assert sorted(acked) == ids[:2]
    assert [job.id for job in jobs] == ids[2:]
    assert live_jobs(queue) == ids[2:]


def test_ack_and_pull_reports_the_acks_when_the_queue_has_nothing_left(
    queue: QueueClient,
) -> None:
    ids = queue.push_batch(Q, [1, 2])
    held = claimed(queue, 2, worker_id="w")

    acked, jobs = queue.ack_and_pull(Q, held, limit=4, worker_id="w")

    assert (sorted(acked), jobs) == (ids, [])


def test_ack_many_skips_a_stale_claim_and_acknowledges_the_rest(
    queue: QueueClient, conn: psycopg.Connection, shift_clock: Shift
) -> None:
    queue.push_batch(Q, [1, 2])
    (stale,) = claimed(queue, 1, visibility_timeout=1)
    (held,) = claimed(queue, 1, visibility_timeout=600)
    conn.commit()
    shift_clock(queue, 2)
    assert queue.tick_timeouts() == 1

    assert queue.ack_many([stale, held]) == [held.id]
    assert live_jobs(queue) == [stale.id]


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("id", "1,2", errors.InvalidJobIdError),
        ("id", True, errors.InvalidJobIdError),
        ("claim_token", "not-a-uuid", errors.InvalidClaimTokenError),
        ("claim_token", "00000000-0000-0000-0000-000000000000,0", errors.InvalidClaimTokenError),
    ],
)
def test_ack_many_refuses_a_malformed_claim_before_acknowledging_anything(
    queue: QueueClient, field: str, value: object, error: type[errors.PostkitError]
) -> None:
    queue.push_batch(Q, [1, 2])
    good, bad = claimed(queue, 2)

    with pytest.raises(error):
        queue.ack_many([good, dataclasses.replace(bad, **{field: value})])

    assert live_jobs(queue) == sorted([good.id, bad.id])
