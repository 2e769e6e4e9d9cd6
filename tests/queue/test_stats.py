"""stats(): live counts per queue, the oldest ready job's age, recent outcomes, and the cap that
keeps it fast on a backlog of any size.

Outcome counters are kept per minute, so the tests that read "the last minute" first move the
session clock to the start of a minute (``start_of_a_minute``): every later statement of the
test then falls in that same minute, whenever the test runs. How much a call reads is measured
exactly, without timing anything: PostgreSQL counts the rows and blocks each backend reads per
table and index during its current transaction (``pg_stat_get_xact_*``), including the
statements that run inside the SQL functions.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient, install
from postkit.queue.records import Job, QueueStats

Shift = Callable[[QueueClient, float], None]

Q = "emails"
OTHER = "reports"


def db_clock(client: QueueClient) -> datetime:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now: datetime = client.cursor.fetchone()[0]
    return now


def pushed(client: QueueClient, queue: str = Q, **kwargs: Any) -> int:
    job_id = client.push(queue, {"n": 0}, **kwargs)
    assert job_id is not None
    return job_id


def pulled(client: QueueClient, queue: str = Q, **kwargs: Any) -> Job:
    job = client.pull(queue, **kwargs)
    assert job is not None
    return job


def claimed(client: QueueClient, queue: str = Q, **push: Any) -> Job:
    job_id = pushed(client, queue, **push)
    job = pulled(client, queue)
    assert job.id == job_id, "the queue held another ready job"
    return job


def one_stats(client: QueueClient, queue: str = Q, **kwargs: Any) -> QueueStats:
    (stats,) = client.stats(queue, **kwargs)
    return stats


def start_of_a_minute(client: QueueClient, shift_clock: Shift) -> float:
    """Move the client's clock to one second past the start of the next minute; returns the
    offset, so the test can shift further from there."""
    shift_clock(client, 0)
    now = db_clock(client)
    offset = 61 - (now.second + now.microsecond / 1_000_000)
    shift_clock(client, offset)
    return offset


# What this backend has read from a table and its indexes in its current transaction: rows
# (returned by scans, and fetched from the heap by index scans) and blocks (hit or read).
READS = """
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)
                    + pg_stat_get_xact_tuples_fetched(c.oid)), 0)::bigint,
       coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
FROM pg_class c
WHERE c.oid = %(table)s::regclass
   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = %(table)s::regclass)
"""


def reads(cursor: Any, table: str) -> tuple[int, int]:
    cursor.execute(READS, {"table": table})
    rows, blocks = cursor.fetchone()
    return int(rows), int(blocks)


# --------------------------------------------------------------------------------------------
# Live counts.
# --------------------------------------------------------------------------------------------


def test_stats_count_pending_scheduled_running_and_dead_jobs_per_queue(
    queue: QueueClient,
) -> None:
    assert queue.fail(claimed(queue))
    claimed(queue)  # left running
    for _ in range(3):
        pushed(queue)
    for _ in range(2):
        pushed(queue, delay=600)
    pushed(queue, OTHER)

    stats = {s.queue: s for s in queue.stats()}

    assert sorted(stats) == [Q, OTHER]
    counts = {
        name: (s.pending, s.scheduled, s.running, s.dead, s.counts_capped)
        for name, s in stats.items()
    }
    assert counts == {Q: (3, 2, 1, 1, False), OTHER: (1, 0, 0, 0, False)}
    assert not any(s.paused for s in stats.values())


def test_stats_count_waiting_and_cancelled_jobs_and_list_their_queues(
    queue: QueueClient,
) -> None:
    parent = pushed(queue)
    for _ in range(2):
        pushed(queue, OTHER, depends_on=[parent])  # the only jobs of OTHER: waiting
    assert queue.cancel(pushed(queue))

    stats = {s.queue: s for s in queue.stats()}

    assert sorted(stats) == [Q, OTHER]
    assert (stats[OTHER].waiting, stats[OTHER].pending, stats[OTHER].cancelled) == (2, 0, 0)
    assert (stats[Q].waiting, stats[Q].pending, stats[Q].cancelled) == (0, 1, 1)


def test_stats_of_one_queue_report_that_queue_only(queue: QueueClient) -> None:
    pushed(queue)
    pushed(queue, OTHER)

    assert [s.queue for s in queue.stats(Q)] == [Q]
    unknown = one_stats(queue, "never-used")
    assert (unknown.pending, unknown.scheduled, unknown.running, unknown.dead) == (0, 0, 0, 0)
    assert (unknown.oldest_ready_age, unknown.mean_attempts) == (None, None)


def test_stats_list_a_queue_that_only_has_dead_letters(queue: QueueClient) -> None:
    assert queue.fail(claimed(queue, OTHER))

    assert [(s.queue, s.dead) for s in queue.stats()] == [(OTHER, 1)]


def test_counts_above_the_cap_read_as_the_cap_and_say_so(queue: QueueClient) -> None:
    for _ in range(2):
        assert queue.fail(claimed(queue))
    for _ in range(5):
        pushed(queue)
    for _ in range(4):
        pushed(queue, delay=600)

    capped = one_stats(queue, cap=3)
    exact = one_stats(queue, cap=10)

    assert (capped.pending, capped.scheduled, capped.dead, capped.counts_capped) == (3, 3, 2, True)
    assert (exact.pending, exact.scheduled, exact.dead, exact.counts_capped) == (5, 4, 2, False)


def test_oldest_ready_age_is_how_long_the_oldest_ready_job_has_waited(
    queue: QueueClient, shift_clock: Shift
) -> None:
    assert one_stats(queue).oldest_ready_age is None
    shift_clock(queue, -300)
    pushed(queue, priority=9, delay=600)  # older and more urgent, but not ready yet
    shift_clock(queue, -90)
    oldest = pushed(queue, priority=0)
    shift_clock(queue, 0)
    pushed(queue, priority=5)  # pulled first, but it has waited less
    job = queue.get_job(oldest)
    assert job is not None and job.run_at is not None

    before = db_clock(queue)
    age = one_stats(queue).oldest_ready_age
    after = db_clock(queue)

    assert age is not None
    assert before - job.run_at <= age <= after - job.run_at
    assert age >= timedelta(seconds=90)


def test_oldest_ready_age_is_none_when_only_scheduled_jobs_wait(queue: QueueClient) -> None:
    pushed(queue, delay=600)

    stats = one_stats(queue)

    assert (stats.scheduled, stats.oldest_ready_age) == (1, None)


# --------------------------------------------------------------------------------------------
# Outcomes.
# --------------------------------------------------------------------------------------------


def test_outcomes_of_the_last_minute_and_hour(queue: QueueClient, shift_clock: Shift) -> None:
    minute = start_of_a_minute(queue, shift_clock)
    shift_clock(queue, minute - 300)
    assert queue.ack(claimed(queue))  # five minutes ago: in the last hour, not the last minute
    shift_clock(queue, minute)

    assert queue.ack(claimed(queue))  # completed at its first attempt
    retried = claimed(queue)
    assert queue.nack(retried, backoff=0)
    assert queue.ack(pulled(queue))  # completed at its second attempt
    assert queue.fail(claimed(queue))  # dead
    assert queue.nack(claimed(queue, max_attempts=1))  # dead: attempts spent
    for name in (Q, OTHER):  # claims that expire: rescued, in this queue and another
        pushed(queue, name)
        pulled(queue, name, visibility_timeout=1)
    shift_clock(queue, minute + 2)
    assert queue.tick_timeouts() == 2  # rescues this queue's job and the other's

    stats = one_stats(queue)

    assert (stats.completed_last_minute, stats.completed_last_hour) == (2, 3)
    assert (stats.dead_lettered_last_minute, stats.dead_lettered_last_hour) == (2, 2)
    assert (stats.retried_last_hour, stats.rescued_last_hour) == (1, 1)
    assert stats.mean_attempts == pytest.approx(4 / 3, abs=0.01)  # attempts 1, 1 and 2
    other = one_stats(queue, OTHER)
    assert (other.completed_last_hour, other.rescued_last_hour, other.mean_attempts) == (0, 1, None)


def test_the_last_minute_slides_past_the_start_of_a_minute(
    queue: QueueClient, shift_clock: Shift
) -> None:
    minute = start_of_a_minute(queue, shift_clock)  # 1 s into a minute
    for _ in range(4):
        assert queue.ack(claimed(queue))

    shift_clock(queue, minute + 74)  # 15 s into the next minute: 45 of its 60 s still count
    sliding = one_stats(queue)
    shift_clock(queue, minute + 120)  # 1 s into the minute after: none of them counts
    later = one_stats(queue)

    assert (sliding.completed_last_minute, sliding.completed_last_hour) == (3, 4)
    assert (later.completed_last_minute, later.completed_last_hour) == (0, 4)


def test_outcomes_of_every_session_add_up(make_client: Callable[[], QueueClient]) -> None:
    clients = [make_client() for _ in range(4)]
    for client in clients:
        assert client.ack(claimed(client))
        client.cursor.connection.commit()

    stats = one_stats(clients[0])

    assert (stats.completed_last_hour, stats.mean_attempts) == (4, 1.0)


def test_outcomes_older_than_an_hour_are_not_counted(
    queue: QueueClient, shift_clock: Shift
) -> None:
    shift_clock(queue, -3700)
    assert queue.ack(claimed(queue))
    shift_clock(queue, 0)

    stats = one_stats(queue)

    assert (stats.completed_last_hour, stats.mean_attempts) == (0, None)


# --------------------------------------------------------------------------------------------
# Bounded work.
# --------------------------------------------------------------------------------------------

DEAD_LETTERS_ELSEWHERE = 20_000


def test_stats_read_a_bounded_number_of_dead_letters_whatever_other_queues_hold(
    queue: QueueClient,
) -> None:
    # Many dead letters in one queue of the namespace (inserted directly: the fast way).
    queue.cursor.execute(
        """
        INSERT INTO postkit_queue.dead_letters (
            namespace, job_id, queue, payload, priority, attempts, max_attempts, reason, error,
            errors, created_at, failed_at, expires_at)
        SELECT %s, -g, 'graveyard', '{}', 0, 1, 1, 'failed', 'boom', '[]', now(),
               now() - g * interval '1 second', now() + interval '30 days'
        FROM generate_series(1, %s) AS g
        """,
        (queue.namespace, DEAD_LETTERS_ELSEWHERE),
    )
    queue.cursor.execute("ANALYZE postkit_queue.dead_letters")
    assert queue.fail(claimed(queue))

    # Repeated, so that the plans plpgsql caches for the counts are measured too.
    for _ in range(6):
        before, _ = reads(queue.cursor, "postkit_queue.dead_letters")
        mine = one_stats(queue, cap=100)
        after_one_queue, _ = reads(queue.cursor, "postkit_queue.dead_letters")
        everything = {s.queue: s for s in queue.stats(cap=100)}
        after_all_queues, _ = reads(queue.cursor, "postkit_queue.dead_letters")

        assert mine.dead == 1
        assert (everything["graveyard"].dead, everything["graveyard"].counts_capped) == (100, True)
        # One queue's stats read its own dead letters, not the graveyard's; every queue's
        # stats read at most the cap of each queue's, whatever the namespace holds.
        assert after_one_queue - before < 50, after_one_queue - before
        assert after_all_queues - after_one_queue < 2 * 100 + 50, after_all_queues - after_one_queue


BACKLOG = 1_000_000
CAP = 10_000


@pytest.mark.slow
def test_stats_on_a_million_job_backlog_read_at_most_the_cap(fresh_database: str) -> None:
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        connection.execute(
            """
            INSERT INTO postkit_queue.jobs (
                namespace, queue, payload, run_at, max_attempts, created_at)
            SELECT 'big', 'backlog', '{}', now() - interval '1 hour', 20, now()
            FROM generate_series(1, %s)
            """,
            (BACKLOG,),
        )
        connection.commit()
        connection.execute("ANALYZE postkit_queue.jobs")
        cursor = connection.cursor()
        client = QueueClient(cursor, namespace="big")
        client.push("backlog", {"n": "scheduled"}, delay=600)
        assert client.ack(claimed(client, "small"))
        pages = cursor.execute(
            "SELECT relpages FROM pg_class WHERE oid = 'postkit_queue.jobs'::regclass"
        ).fetchone()
        assert pages is not None
        table_pages = int(pages[0])

        rows_before, blocks_before = reads(cursor, "postkit_queue.jobs")
        stats = {s.queue: s for s in client.stats(cap=CAP)}
        rows_after, blocks_after = reads(cursor, "postkit_queue.jobs")

    big = stats["backlog"]
    assert (big.pending, big.scheduled, big.running, big.counts_capped) == (CAP, 1, 0, True)
    assert big.oldest_ready_age is not None and big.oldest_ready_age >= timedelta(hours=1)
    assert stats["small"].completed_last_hour == 1
    # Each count stops at the cap: the rows read are a small multiple of the cap, not the
    # backlog, and the blocks a small fraction of the table.
    assert rows_after - rows_before <= 3 * CAP, rows_after - rows_before
    assert blocks_after - blocks_before <= table_pages // 20, (
        f"{blocks_after - blocks_before} blocks read of a {table_pages}-page table"
    )
