"""The reads a dashboard builds its pages from: outcomes per minute, what the workers run now,
what became of each schedule's last run, and the bounded search of the dead letters.

What each read returns, one guarantee per test. That each stays an index range scan on a large
backlog is tests/queue/test_dashboard_plans.py's part. Time moves only through the session clock
offset (``shift_clock``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from postkit import errors
from postkit.queue import DeadLetter, DeadLetterSearch, QueueClient
from postkit.queue.records import Job, OutcomeMinute

Shift = Callable[[QueueClient, float], None]

Q = "emails"
OTHER = "reports"


def db_clock(client: QueueClient) -> datetime:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now: datetime = client.cursor.fetchone()[0]
    return now


def claimed(client: QueueClient, queue: str = Q, **pull: Any) -> Job:
    job_id = client.push(queue, {"n": 0})
    job = client.pull(queue, **pull)
    assert job is not None and job.id == job_id, "the queue held another ready job"
    return job


def bury(client: QueueClient, queue: str = Q, *, error: str = "boom") -> int:
    job = claimed(client, queue)
    assert client.fail(job, error=error)
    return job.id


# --------------------------------------------------------------------------------------------
# outcome_series
# --------------------------------------------------------------------------------------------


@pytest.fixture
def two_minutes(queue: QueueClient, shift_clock: Shift) -> tuple[datetime, datetime]:
    """Outcomes in two minutes: in the first, Q completes one job, dead-letters one, retries one
    and has one rescued, and OTHER completes one; in the second, Q completes two (the rescued
    one and a new one). Returns the starts of the two minutes."""
    shift_clock(queue, 0)
    now = db_clock(queue)
    offset = 61 - (now.second + now.microsecond / 1_000_000)  # one second into a minute
    shift_clock(queue, offset)
    first = db_clock(queue).replace(second=0, microsecond=0)
    assert queue.ack(claimed(queue))
    bury(queue)
    assert queue.nack(claimed(queue), backoff=3600)
    claimed(queue, visibility_timeout=1)
    shift_clock(queue, offset + 2)
    assert queue.tick_timeouts() == 1
    assert queue.ack(claimed(queue, OTHER))
    shift_clock(queue, offset + 60)
    queue.push(Q, {"n": 1})
    for _ in range(2):
        job = queue.pull(Q)
        assert job is not None and queue.ack(job)
    return first, first + timedelta(minutes=1)


def test_outcome_series_counts_each_queues_outcomes_per_minute(
    queue: QueueClient, two_minutes: tuple[datetime, datetime]
) -> None:
    first, second = two_minutes

    series = queue.outcome_series(first - timedelta(minutes=5))

    assert series == [
        OutcomeMinute(Q, first, completed=1, dead_lettered=1, retried=1, rescued=1),
        OutcomeMinute(Q, second, completed=2, dead_lettered=0, retried=0, rescued=0),
        OutcomeMinute(OTHER, first, completed=1, dead_lettered=0, retried=0, rescued=0),
    ]


def test_outcome_series_starts_at_the_minute_of_since(
    queue: QueueClient, two_minutes: tuple[datetime, datetime]
) -> None:
    _, second = two_minutes

    series = queue.outcome_series(second + timedelta(seconds=59))

    assert [(point.queue, point.minute) for point in series] == [(Q, second)]


def test_outcome_series_of_one_queue_leaves_the_others_out(
    queue: QueueClient, two_minutes: tuple[datetime, datetime]
) -> None:
    first, _ = two_minutes

    series = queue.outcome_series(first, queue=OTHER)

    assert series == [
        OutcomeMinute(OTHER, first, completed=1, dead_lettered=0, retried=0, rescued=0)
    ]


def test_outcome_series_without_a_timezone_is_refused_before_anything_is_sent(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    with pytest.raises(errors.InvalidDurationError, match="timezone-aware"):
        queue.outcome_series(datetime(2025, 1, 1))

    assert conn.info.transaction_status == TransactionStatus.IDLE


# --------------------------------------------------------------------------------------------
# running_jobs
# --------------------------------------------------------------------------------------------


def test_running_jobs_are_what_each_worker_runs_soonest_deadline_first(
    queue: QueueClient,
) -> None:
    slow = claimed(queue, worker_id="server-a", visibility_timeout=600)
    quick = claimed(queue, OTHER, worker_id="server-b", visibility_timeout=60)
    queue.push(Q, {"waiting": True})
    queue.push(Q, {"later": True}, delay=3600)

    running = queue.running_jobs()

    assert [(job.id, job.queue, job.worker_id) for job in running] == [
        (quick.id, OTHER, "server-b"),
        (slow.id, Q, "server-a"),
    ]
    assert [(job.attempts, job.claimed_at, job.visible_until) for job in running] == [
        (1, quick.claimed_at, quick.visible_until),
        (1, slow.claimed_at, slow.visible_until),
    ]
    assert all(timedelta(0) <= job.running_for < timedelta(minutes=1) for job in running)


def test_running_jobs_stop_at_the_limit(queue: QueueClient) -> None:
    for timeout in (30, 60, 90):
        claimed(queue, visibility_timeout=timeout)

    assert len(queue.running_jobs(limit=2)) == 2


# --------------------------------------------------------------------------------------------
# schedule_runs
# --------------------------------------------------------------------------------------------


def test_schedule_runs_tell_what_became_of_each_schedules_last_job(
    queue: QueueClient, shift_clock: Shift
) -> None:
    queue.configure_queue("archived", retain_completed=3600)
    for name in ("completed", "dead", "gone", "pending", "running"):
        queue.create_schedule(name, "archived" if name == "completed" else name, {}, every=60)
    queue.create_schedule("never", "never", {}, every=3600)
    shift_clock(queue, 61)
    fired = {run.name: run.job_id for run in queue.tick_schedules()}  # type: ignore[union-attr]
    for queue_name in ("archived", "gone"):
        job = queue.pull(queue_name)
        assert job is not None and queue.ack(job)
    dead = queue.pull("dead")
    assert dead is not None and queue.fail(dead, error="no such user")
    assert queue.pull("running") is not None

    runs = {run.name: run for run in queue.schedule_runs()}

    assert {name: (run.last_job_id, run.last_job_state) for name, run in runs.items()} == {
        "completed": (fired["completed"], "completed"),
        "dead": (fired["dead"], "dead"),
        "gone": (fired["gone"], None),
        "never": (None, None),
        "pending": (fired["pending"], "pending"),
        "running": (fired["running"], "running"),
    }
    assert (runs["dead"].error, runs["dead"].attempts) == ("no such user", 1)
    assert runs["dead"].finished_at is not None and runs["completed"].finished_at is not None
    assert runs["never"].last_run_at is None and runs["pending"].last_run_at is not None


# --------------------------------------------------------------------------------------------
# job_lineage
# --------------------------------------------------------------------------------------------


@pytest.fixture
def redriven_twice(queue: QueueClient) -> tuple[int, int, int]:
    """A job dead-lettered, redriven, dead-lettered again and redriven again: the three ids."""
    first = bury(queue, error="first failure")
    (again,) = queue.redrive([first])
    second = queue.pull(Q)
    assert second is not None and second.id == again.new_job_id
    assert queue.fail(second, error="second failure")
    (third,) = queue.redrive([second.id])
    assert third.new_job_id is not None
    return first, second.id, third.new_job_id


@pytest.mark.parametrize("asked", [0, 1, 2], ids=["first", "middle", "last"])
def test_job_lineage_is_the_whole_chain_of_redrives_from_any_of_its_jobs(
    queue: QueueClient, redriven_twice: tuple[int, int, int], asked: int
) -> None:
    first, second, third = redriven_twice

    lineage = queue.job_lineage(redriven_twice[asked])

    assert [(s.job_id, s.state, s.redriven_job_id) for s in lineage] == [
        (first, "dead", second),
        (second, "dead", third),
        (third, "pending", None),
    ]
    assert [s.error for s in lineage] == ["first failure", "second failure", None]


def test_job_lineage_keeps_a_job_that_left_without_a_trace(
    queue: QueueClient, redriven_twice: tuple[int, int, int]
) -> None:
    first, _, third = redriven_twice
    job = queue.pull(Q)
    assert job is not None and job.id == third and queue.ack(job)

    *_, last = queue.job_lineage(first)

    assert (last.job_id, last.state, last.queue) == (third, None, None)


def test_job_lineage_follows_at_most_its_limit_of_steps_each_way(
    queue: QueueClient, redriven_twice: tuple[int, int, int]
) -> None:
    first, second, third = redriven_twice

    assert [s.job_id for s in queue.job_lineage(first, limit=1)] == [first, second]
    assert [s.job_id for s in queue.job_lineage(third, limit=1)] == [second, third]


def test_job_lineage_of_a_job_never_redriven_is_the_job_alone(queue: QueueClient) -> None:
    job_id = queue.push(Q, {})
    assert job_id is not None

    assert [(s.job_id, s.state) for s in queue.job_lineage(job_id)] == [(job_id, "pending")]
    assert queue.job_lineage(2**62) == []


# --------------------------------------------------------------------------------------------
# count_dead_letters
# --------------------------------------------------------------------------------------------


def test_count_dead_letters_counts_what_dead_letters_lists_with_the_same_filters(
    queue: QueueClient, shift_clock: Shift
) -> None:
    early = [bury(queue), bury(queue, OTHER)]
    shift_clock(queue, 600)
    middle = db_clock(queue)
    late = [bury(queue), bury(queue), bury(queue, OTHER)]
    queue.redrive([late[0]])
    filters: list[dict[str, Any]] = [
        {},
        {"queue": Q},
        {"failed_before": middle},
        {"queue": Q, "failed_after": middle},
        {"queue": Q, "include_redriven": True},
        {"failed_before": middle + timedelta(hours=1), "include_redriven": True},
    ]

    counted = [queue.count_dead_letters(**f) for f in filters]

    assert counted == [len(queue.dead_letters(**f)) for f in filters] == [4, 2, 2, 1, 3, 5]
    assert len(early + late) == 5


def test_count_dead_letters_stops_at_its_cap(queue: QueueClient) -> None:
    for _ in range(4):
        bury(queue)

    assert queue.count_dead_letters(cap=3) == 3
    assert queue.count_dead_letters(cap=4) == 4


# --------------------------------------------------------------------------------------------
# search_dead_letters
# --------------------------------------------------------------------------------------------


@pytest.fixture
def letters(queue: QueueClient) -> list[int]:
    """Ten dead letters, oldest first: those at 1, 4, 5 and 8 failed with a timeout."""
    return [
        bury(queue, error="ReadTimeout: upstream" if n in (1, 4, 5, 8) else f"ValueError {n}")
        for n in range(10)
    ]


def found(search: DeadLetterSearch) -> list[int]:
    return [letter.job_id for letter in search.letters]


def test_a_search_returns_the_matches_newest_first_ignoring_case(
    queue: QueueClient, letters: list[int]
) -> None:
    search = queue.search_dead_letters("readtimeout")

    assert found(search) == [letters[8], letters[5], letters[4], letters[1]]
    assert (search.cut, search.next_after) == (False, None)


def test_a_search_that_reads_its_bound_says_where_it_stopped(
    queue: QueueClient, letters: list[int]
) -> None:
    search = queue.search_dead_letters("timeout", scan_limit=3)

    assert found(search) == [letters[8]]
    assert search.cut
    assert search.next_after is not None and search.next_after.job_id == letters[7]


def test_searching_on_from_where_it_stopped_finds_every_match_once(
    queue: QueueClient, letters: list[int]
) -> None:
    pages: list[list[int]] = []
    after: DeadLetter | None = None
    while True:
        search = queue.search_dead_letters("timeout", limit=2, scan_limit=3, after=after)
        pages.append(found(search))
        if search.next_after is None:
            break
        after = search.next_after

    # Each call reads three: 9 8 7 (one match, cut), 6 5 4 (a full page), 3 2 1 (cut), 0.
    assert pages == [[letters[8]], [letters[5], letters[4]], [letters[1]], []]


def test_a_full_page_of_matches_continues_after_its_last_match(
    queue: QueueClient, letters: list[int]
) -> None:
    search = queue.search_dead_letters("timeout", limit=2)

    assert found(search) == [letters[8], letters[5]]
    assert not search.cut
    assert search.next_after == search.letters[-1]


def test_a_search_filters_by_queue_among_the_dead_letters_it_reads(
    queue: QueueClient, letters: list[int]
) -> None:
    other = bury(queue, OTHER, error="ReadTimeout: reports")

    assert found(queue.search_dead_letters("timeout", OTHER)) == [other]
    assert found(queue.search_dead_letters("timeout", OTHER, scan_limit=1)) == [other]
    assert found(queue.search_dead_letters("timeout", Q, scan_limit=1)) == []


def test_a_search_leaves_out_redriven_dead_letters_unless_asked(
    queue: QueueClient, letters: list[int]
) -> None:
    queue.redrive([letters[8]])

    assert found(queue.search_dead_letters("timeout"))[0] == letters[5]
    assert found(queue.search_dead_letters("timeout", include_redriven=True))[0] == letters[8]


def test_a_search_finds_what_dead_letters_finds_with_the_same_filter(
    queue: QueueClient, letters: list[int]
) -> None:
    by_listing = queue.dead_letters(error_contains="TIMEOUT: UP")

    assert found(queue.search_dead_letters("TIMEOUT: UP")) == [d.job_id for d in by_listing]


@pytest.mark.parametrize("needle", ["", None, 42], ids=["empty", "none", "int"])
def test_a_search_for_no_text_is_refused_before_anything_is_sent(
    queue: QueueClient, conn: psycopg.Connection, needle: Any
) -> None:
    with pytest.raises(errors.InvalidNameError, match="error_contains"):
        queue.search_dead_letters(needle)

    assert conn.info.transaction_status == TransactionStatus.IDLE
