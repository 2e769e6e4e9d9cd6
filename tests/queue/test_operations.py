"""Operating a queue: listing jobs and dead letters, redrive, purge, cancel, pause, retention.

One guarantee per test, against the real database. Time moves only through the session clock
offset (``shift_clock``); the one concurrent case forces its interleaving with
``pg_blocking_pids`` instead of hoping for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.pq import TransactionStatus

from postkit import errors
from postkit.queue import JobCursor, QueueClient
from postkit.queue.protocol.operations import JOB_STATES
from postkit.queue.records import DeadLetter, Job, QueuePolicy

Shift = Callable[[QueueClient, float], None]

Q = "emails"
OTHER = "reports"
UNKNOWN_JOB_ID = 2**62
BLOCK_TIMEOUT = 10.0


# --------------------------------------------------------------------------------------------
# Helpers.
# --------------------------------------------------------------------------------------------


def db_clock(client: QueueClient) -> datetime:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now: datetime = client.cursor.fetchone()[0]
    return now


def commit(client: QueueClient) -> None:
    client.cursor.connection.commit()


def pulled(client: QueueClient, queue: str = Q, **kwargs: Any) -> Job:
    job = client.pull(queue, **kwargs)
    assert job is not None
    return job


def pushed(client: QueueClient, queue: str = Q, payload: Any = None, **kwargs: Any) -> int:
    job_id = client.push(queue, {"n": 0} if payload is None else payload, **kwargs)
    assert job_id is not None
    return job_id


def bury(
    client: QueueClient, queue: str = Q, *, error: str = "boom", payload: Any = None, **push: Any
) -> int:
    """Push a job to ``queue``, claim it and fail it: returns the id of its dead letter."""
    job_id = pushed(client, queue, payload, **push)
    job = pulled(client, queue)
    assert job.id == job_id, "the queue held another ready job"
    assert client.fail(job, error=error)
    return job_id


def dead_ids(letters: list[DeadLetter]) -> list[int]:
    return [letter.job_id for letter in letters]


def live_jobs(client: QueueClient, queue: str) -> list[int]:
    """Every live job of ``queue``, in any state, by id."""
    client.cursor.execute(
        "SELECT id FROM postkit_queue.jobs WHERE namespace = %s AND queue = %s ORDER BY id",
        (client.namespace, queue),
    )
    return [row[0] for row in client.cursor.fetchall()]


def one_stats(client: QueueClient, queue: str) -> Any:
    (stats,) = client.stats(queue)
    return stats


def backend_pid(client: QueueClient) -> int:
    return int(client.cursor.connection.info.backend_pid)


@pytest.fixture
def executor() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


# --------------------------------------------------------------------------------------------
# jobs(): listing by state, with keyset pagination.
# --------------------------------------------------------------------------------------------


def test_jobs_lists_the_jobs_of_a_queue_in_each_state(queue: QueueClient) -> None:
    dead = bury(queue, priority=9)
    running = pushed(queue, priority=5)
    assert pulled(queue).id == running
    ready = [pushed(queue), pushed(queue)]
    scheduled = [pushed(queue, delay=600)]
    bury(queue, OTHER)
    pushed(queue, OTHER)

    listed = {state: queue.jobs(Q, state) for state in ("pending", "scheduled", "running", "dead")}

    assert {state: [job.id for job in jobs] for state, jobs in listed.items()} == {
        "pending": ready,
        "scheduled": scheduled,
        "running": [running],
        "dead": [dead],
    }
    assert [job.state for job in listed["running"]] == ["running"]
    (buried,) = listed["dead"]
    assert (buried.state, buried.queue, buried.attempts) == ("dead", Q, 1)
    assert buried.failed_at is not None and buried.run_at is None


def every_page(client: QueueClient, state: str, *, limit: int) -> list[list[int]]:
    """The ids of each page of the ``state`` listing of Q, each page after the last job of the
    one before."""
    pages: list[list[int]] = []
    after: Job | None = None
    while page := client.jobs(Q, state, limit=limit, after=after):
        pages.append([job.id for job in page])
        after = page[-1]
    return pages


def test_pending_pages_are_in_pull_order_and_hold_every_ready_job_once(
    queue: QueueClient, shift_clock: Shift
) -> None:
    pushed_as = {}
    for n in range(23):
        priority = (n * 7) % 3  # 0, 1, 2 interleaved
        job_id = pushed(queue, payload={"n": n}, priority=priority, delay=60 * (n % 4))
        pushed_as[job_id] = (priority, n % 4, job_id)
        pushed(queue, payload={"later": n}, delay=3600)  # scheduled: never on a pending page
    shift_clock(queue, 200)  # every job with a delay of up to 3 minutes is ready now

    pages = every_page(queue, "pending", limit=5)

    in_pull_order = sorted(
        pushed_as, key=lambda job_id: (-pushed_as[job_id][0], *pushed_as[job_id][1:])
    )
    assert [len(page) for page in pages] == [5, 5, 5, 5, 3]
    assert [job_id for page in pages for job_id in page] == in_pull_order


def test_scheduled_pages_are_in_pull_order_and_hold_no_ready_job(queue: QueueClient) -> None:
    later = [pushed(queue, priority=n % 2, delay=600 + n) for n in range(7)]
    pushed(queue, priority=1)  # ready: never on a scheduled page

    pages = every_page(queue, "scheduled", limit=3)

    assert [job_id for page in pages for job_id in page] == later[1::2] + later[0::2]


def test_running_pages_are_soonest_deadline_first_and_of_the_queue_alone(
    queue: QueueClient,
) -> None:
    claims = []
    for timeout in (300, 60, 600, 120):
        pushed(queue)
        claims.append(pulled(queue, visibility_timeout=timeout))
    pushed(queue, OTHER)
    pulled(queue, OTHER, visibility_timeout=1)  # the soonest deadline, of another queue

    pages = every_page(queue, "running", limit=3)

    by_deadline = sorted(claims, key=lambda job: job.visible_until or datetime.max)
    assert pages == [[job.id for job in by_deadline[:3]], [by_deadline[3].id]]


def test_dead_pages_are_by_id_and_leave_out_redriven_dead_letters(queue: QueueClient) -> None:
    dead = [bury(queue) for _ in range(5)]
    queue.redrive([dead[2]])

    assert every_page(queue, "dead", limit=2) == [[dead[0], dead[1]], [dead[3], dead[4]]]


def test_a_page_continues_after_its_cursor_once_that_job_was_claimed(queue: QueueClient) -> None:
    ready = [pushed(queue) for _ in range(4)]
    (first,) = queue.jobs(Q, "pending", limit=1)
    assert pulled(queue).id == first.id == ready[0]

    assert [job.id for job in queue.jobs(Q, "pending", after=first)] == ready[1:]


def test_jobs_tells_each_jobs_age_by_the_queues_clock(
    queue: QueueClient, shift_clock: Shift
) -> None:
    bury(queue)
    pushed(queue)
    pushed(queue, delay=3600)
    shift_clock(queue, 100)

    ages = [job.age for state in ("pending", "scheduled", "dead") for job in queue.jobs(Q, state)]

    assert len(ages) == 3
    assert all(
        age is not None and timedelta(seconds=100) <= age < timedelta(seconds=160) for age in ages
    )


def test_a_cursor_token_reads_back_as_the_same_cursor(queue: QueueClient) -> None:
    pushed(queue, priority=-3)
    pushed(queue, delay=600)
    pushed(queue)
    running = pulled(queue)
    bury(queue, OTHER)
    pushed(queue, depends_on=[pushed(queue, delay=1200)])
    assert queue.cancel(pushed(queue, delay=1800))
    listed = {state: queue.jobs(Q if state != "dead" else OTHER, state)[-1] for state in JOB_STATES}

    cursors = [JobCursor.after(job, state) for state, job in listed.items()]

    assert [JobCursor.parse(cursor.token) for cursor in cursors] == cursors
    assert JobCursor.after(running, "running").at == running.visible_until


@pytest.mark.parametrize(
    "token",
    [
        "",
        "pending",
        "pending:1",
        "pending:1:0",
        "pending:x:0:0",
        "dead:1:2",
        "done:1",
        "running:1:0:0",
    ],
)
def test_a_token_that_is_no_cursor_raises_invalid_state(token: str) -> None:
    with pytest.raises(errors.InvalidStateError, match="not the cursor"):
        JobCursor.parse(token)


def test_a_cursor_of_another_listing_is_refused_before_anything_is_sent(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    pushed(queue)
    (job,) = queue.jobs(Q, "pending")
    conn.commit()

    with pytest.raises(errors.InvalidStateError, match="continues a pending listing"):
        queue.jobs(Q, "scheduled", after=JobCursor.after(job, "pending"))
    with pytest.raises(errors.InvalidStateError, match="no claim deadline"):
        queue.jobs(Q, "running", after=job)

    assert conn.info.transaction_status == TransactionStatus.IDLE


def test_the_sql_function_refuses_a_cursor_without_the_columns_its_listing_orders_by(
    queue: QueueClient,
) -> None:
    with pytest.raises(psycopg.Error, match="priority and run_at") as raised:
        queue.cursor.execute(
            "SELECT * FROM postkit_queue.jobs(%s, %s, 'pending', 10, 42)", (queue.namespace, Q)
        )

    assert raised.value.sqlstate == "PKQ09"


@pytest.mark.parametrize(
    "state", ["done", "PENDING", "", None, 1], ids=["done", "uppercase", "empty", "none", "int"]
)
def test_jobs_with_an_unknown_state_raises_invalid_state(
    queue: QueueClient, conn: psycopg.Connection, state: Any
) -> None:
    with pytest.raises(errors.InvalidStateError, match="pending"):
        queue.jobs(Q, state)

    assert conn.info.transaction_status == TransactionStatus.IDLE  # refused before sending


# --------------------------------------------------------------------------------------------
# Dead letters: filters and pagination.
# --------------------------------------------------------------------------------------------


def test_dead_letters_of_one_queue(queue: QueueClient) -> None:
    mine = [bury(queue), bury(queue)]
    bury(queue, OTHER)

    assert dead_ids(queue.dead_letters(Q)) == mine[::-1]  # newest first


def test_dead_letters_failed_after_is_inclusive_and_failed_before_exclusive(
    queue: QueueClient, shift_clock: Shift
) -> None:
    ids = []
    for offset in (0, 100, 200):
        shift_clock(queue, offset)
        ids.append(bury(queue))
    shift_clock(queue, 0)
    first, middle, last = ids
    failed_at = {letter.job_id: letter.failed_at for letter in queue.dead_letters(Q)}

    assert dead_ids(queue.dead_letters(Q, failed_after=failed_at[middle])) == [last, middle]
    assert dead_ids(queue.dead_letters(Q, failed_before=failed_at[middle])) == [first]
    assert dead_ids(
        queue.dead_letters(Q, failed_after=failed_at[middle], failed_before=failed_at[last])
    ) == [middle]


def test_dead_letters_whose_error_contains_a_substring_ignoring_case(queue: QueueClient) -> None:
    timeout = bury(queue, error="Timeout talking to SMTP relay")
    bury(queue, error="ValueError: bad address")
    refused = bury(queue, error="smtp: 550 mailbox unavailable")

    assert dead_ids(queue.dead_letters(error_contains="SMTP")) == [refused, timeout]
    assert dead_ids(queue.dead_letters(error_contains="sMtP rElAy")) == [timeout]
    assert queue.dead_letters(error_contains="%") == []  # a substring, not a LIKE pattern


def test_redriven_dead_letters_are_listed_only_when_asked(queue: QueueClient) -> None:
    kept, redriven = bury(queue), bury(queue)
    (done,) = queue.redrive([redriven])

    assert dead_ids(queue.dead_letters(Q)) == [kept]
    listed = {letter.job_id: letter for letter in queue.dead_letters(Q, include_redriven=True)}
    assert sorted(listed) == [kept, redriven]
    assert listed[redriven].redriven_job_id == done.new_job_id
    assert listed[kept].redriven_job_id is None


def test_dead_letter_pages_return_every_dead_letter_once_newest_first(
    queue: QueueClient, shift_clock: Shift
) -> None:
    # Five dead letters share one failed_at (one tick_timeouts buries them in one statement),
    # so the cursor must break ties by job id.
    tied = [pushed(queue, max_attempts=1) for _ in range(5)]
    for _ in tied:
        pulled(queue, visibility_timeout=1)
    shift_clock(queue, 2)
    assert queue.tick_timeouts() == 5
    later = [bury(queue) for _ in range(7)]
    everything = queue.dead_letters(Q, limit=100)
    assert len({letter.failed_at for letter in everything if letter.job_id in tied}) == 1

    pages: list[list[DeadLetter]] = []
    after: DeadLetter | None = None
    while page := queue.dead_letters(Q, limit=4, after=after):
        pages.append(page)
        after = page[-1]

    assert [len(page) for page in pages] == [4, 4, 4]
    paged = [letter for page in pages for letter in page]
    assert dead_ids(paged) == dead_ids(everything)
    assert sorted(dead_ids(paged)) == sorted(tied + later)
    assert [(d.failed_at, d.job_id) for d in paged] == sorted(
        ((d.failed_at, d.job_id) for d in paged), reverse=True
    )


# --------------------------------------------------------------------------------------------
# Redrive.
# --------------------------------------------------------------------------------------------


def test_redrive_retries_a_dead_letter_in_its_own_queue_as_a_fresh_job(
    queue: QueueClient,
) -> None:
    pushed(queue, payload={"to": "ada@example.com"}, priority=3, max_attempts=2)
    for _ in range(2):
        assert queue.nack(pulled(queue), error="smtp down", backoff=0)
    (letter,) = queue.dead_letters(Q)
    assert (letter.reason, letter.attempts) == ("attempts_exhausted", 2)

    (redriven,) = queue.redrive([letter.job_id])

    assert (redriven.job_id, redriven.queue) == (letter.job_id, Q)
    assert redriven.new_job_id is not None and redriven.new_job_id != letter.job_id
    fresh = queue.get_job(redriven.new_job_id)
    assert fresh is not None
    assert (fresh.state, fresh.queue, fresh.payload) == ("pending", Q, {"to": "ada@example.com"})
    assert (fresh.attempts, fresh.max_attempts, fresh.priority, fresh.errors) == (0, 2, 3, ())
    assert pulled(queue).id == redriven.new_job_id


def test_a_redriven_dead_letter_keeps_its_link_and_leaves_the_dead_count(
    queue: QueueClient,
) -> None:
    job_id = bury(queue)
    assert one_stats(queue, Q).dead == 1

    (redriven,) = queue.redrive([job_id])

    (letter,) = queue.dead_letters(Q, include_redriven=True)
    assert letter.redriven_job_id == redriven.new_job_id
    assert letter.redriven_at is not None and letter.redriven_at >= letter.failed_at
    assert queue.dead_letters(Q) == []
    stats = one_stats(queue, Q)
    assert (stats.dead, stats.pending) == (0, 1)
    dead = queue.get_job(job_id)
    assert dead is not None and dead.state == "dead"  # the dead letter itself stays


def test_redrive_into_another_queue(queue: QueueClient) -> None:
    job_id = bury(queue, payload={"report": 7})

    (redriven,) = queue.redrive([job_id], to_queue=OTHER)

    assert redriven.queue == OTHER
    assert queue.pull(Q) is None
    job = pulled(queue, OTHER)
    assert (job.id, job.payload, job.attempts) == (redriven.new_job_id, {"report": 7}, 1)


def test_redriving_a_dead_letter_twice_does_nothing_the_second_time(queue: QueueClient) -> None:
    job_id = bury(queue)
    (first,) = queue.redrive([job_id])

    assert queue.redrive([job_id]) == []
    assert queue.redrive(queue=Q) == []
    assert live_jobs(queue, Q) == [first.new_job_id]


def test_a_dry_run_returns_what_would_be_redriven_and_changes_nothing(
    queue: QueueClient,
) -> None:
    ids = [bury(queue), bury(queue)]
    before = queue.dead_letters(Q)

    would = queue.redrive(queue=Q, to_queue=OTHER, dry_run=True)

    assert [(r.job_id, r.queue, r.new_job_id) for r in would] == [
        (ids[0], OTHER, None),
        (ids[1], OTHER, None),
    ]
    assert queue.dead_letters(Q) == before
    assert live_jobs(queue, Q) == [] and live_jobs(queue, OTHER) == []


def test_redrive_by_filter_retries_exactly_the_matching_dead_letters(
    queue: QueueClient,
) -> None:
    smtp = [bury(queue, error="SMTP timeout"), bury(queue, error="smtp timeout again")]
    bury(queue, error="bad address")
    bury(queue, OTHER, error="SMTP timeout")

    redriven = queue.redrive(queue=Q, error_contains="smtp")

    assert [r.job_id for r in redriven] == smtp
    assert live_jobs(queue, Q) == sorted(r.new_job_id or 0 for r in redriven)
    assert live_jobs(queue, OTHER) == []
    remaining = sorted(dead_ids(queue.dead_letters()))
    assert [r.job_id for r in queue.redrive(limit=1)] == remaining[:1]  # lowest id first


def test_two_operators_redriving_one_dead_letter_create_one_job(
    make_client: Callable[[], QueueClient],
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    first, second = make_client(), make_client()
    job_id = bury(first)
    commit(first)

    (redriven,) = first.redrive([job_id])  # transaction left open: the dead letter stays locked
    racing = executor.submit(second.redrive, [job_id])
    wait_until_blocked(second, first, racing)
    commit(first)

    assert racing.result(timeout=BLOCK_TIMEOUT) == []
    commit(second)
    assert live_jobs(second, Q) == [redriven.new_job_id]
    (letter,) = second.dead_letters(Q, include_redriven=True)
    assert letter.redriven_job_id == redriven.new_job_id


# --------------------------------------------------------------------------------------------
# purge_dead_letters and cancel.
# --------------------------------------------------------------------------------------------


def test_purge_dead_letters_deletes_those_that_failed_longer_ago_than_asked(
    queue: QueueClient, shift_clock: Shift
) -> None:
    old = bury(queue)
    old_elsewhere = bury(queue, OTHER)
    shift_clock(queue, 3600)
    recent = bury(queue)

    assert queue.purge_dead_letters(older_than=1800, queue=Q) == 1
    assert dead_ids(queue.dead_letters()) == [recent, old_elsewhere]
    assert queue.purge_dead_letters(older_than=timedelta(minutes=30)) == 1
    assert dead_ids(queue.dead_letters()) == [recent]
    assert old not in dead_ids(queue.dead_letters(include_redriven=True))


def test_a_purge_narrowed_to_ids_deletes_only_those(queue: QueueClient) -> None:
    kept, chosen, elsewhere = bury(queue), bury(queue), bury(queue, OTHER)
    cutoff = db_clock(queue) + timedelta(seconds=1)

    assert queue.purge_dead_letters(failed_before=cutoff, job_ids=[chosen, elsewhere], queue=Q) == 1

    assert dead_ids(queue.dead_letters()) == [elsewhere, kept]


def test_a_purge_of_a_window_spares_what_failed_before_it_or_at_its_cutoff(
    queue: QueueClient, shift_clock: Shift
) -> None:
    before = bury(queue)
    shift_clock(queue, 60)
    start = db_clock(queue)
    inside = bury(queue)
    shift_clock(queue, 120)
    cutoff = db_clock(queue)
    after = bury(queue)

    counted = queue.count_dead_letters(
        failed_after=start, failed_before=cutoff, include_redriven=True
    )
    assert queue.purge_dead_letters(failed_before=cutoff, failed_after=start) == counted == 1

    assert dead_ids(queue.dead_letters()) == [after, before]
    assert inside not in dead_ids(queue.dead_letters(include_redriven=True))


def test_ids_or_a_window_with_older_than_are_refused_before_any_sql(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidDurationError, match="need failed_before"):
        queue.purge_dead_letters(older_than=60, job_ids=[1])
    with pytest.raises(errors.InvalidDurationError, match="need failed_before"):
        queue.purge_dead_letters(older_than=60, failed_after=db_clock(queue))


def test_queue_policy_reads_the_policy_in_force_and_changes_nothing(queue: QueueClient) -> None:
    assert queue.queue_policy("never-configured").max_attempts == 20
    configured = queue.configure_queue(Q, max_attempts=3, visibility_timeout=90)
    queue.pause_queue(Q)

    policy = queue.queue_policy(Q)

    assert policy == QueuePolicy(**{**configured, "paused": True})
    assert queue.queues() == [Q]  # reading a policy creates no settings row


@pytest.mark.parametrize("delay", [0, 600], ids=["pending", "scheduled"])
def test_cancel_removes_a_waiting_job(queue: QueueClient, delay: int) -> None:
    job_id = pushed(queue, delay=delay)

    assert queue.cancel(job_id) is True

    cancelled = queue.get_job(job_id)
    assert cancelled is not None and cancelled.state == "cancelled"
    assert live_jobs(queue, Q) == []
    assert (queue.result(job_id).state, queue.result(job_id).reason) == ("cancelled", "cancelled")


def test_cancelling_a_running_job_makes_every_call_of_its_claim_stale(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    pushed(queue)
    job = pulled(queue, worker_id="w")
    conn.commit()

    assert queue.cancel(job.id) is True

    assert queue.ack(job) is False
    assert queue.nack_outcome(job, error="late") == "stale"
    assert queue.fail(job, error="late") is False
    assert queue.extend_visibility(job, extension=30) is False
    assert queue.report_progress(job, 0.5) is False
    assert queue.release(job) is False
    assert (queue.result(job.id).state, queue.result(job.id).reason) == ("cancelled", "cancelled")
    assert queue.tick_timeouts() == 0 and queue.pull(Q) is None  # never retried


def test_cancelling_an_unknown_job_returns_false(queue: QueueClient, other_namespace: str) -> None:
    elsewhere = QueueClient(queue.cursor, namespace=other_namespace)
    foreign = pushed(elsewhere)

    assert queue.cancel(UNKNOWN_JOB_ID) is False
    assert queue.cancel(foreign) is False
    assert elsewhere.get_job(foreign) is not None


def test_cancel_queue_cancels_every_live_job_of_the_queue_and_what_waits_for_them(
    queue: QueueClient,
) -> None:
    pushed(queue)
    running = queue.pull(Q, worker_id="w")
    assert running is not None
    ready, later = pushed(queue), pushed(queue, delay=600)
    waiting = pushed(queue, depends_on=[ready])
    child_elsewhere = pushed(queue, "reports", depends_on=[later])
    untouched = pushed(queue, "reports")

    assert queue.cancel_queue(Q) == 5  # four of the queue's, and one descendant elsewhere

    for job_id in (running.id, ready, later, waiting, child_elsewhere):
        assert queue.result(job_id).state == "cancelled"
    assert queue.ack(running) is False
    assert queue.get_job(untouched) is not None
    assert queue.cancel_queue(Q) == 0


def test_cancel_queue_leaves_the_jobs_pushed_after_its_cutoff_and_stops_at_its_limit(
    queue: QueueClient, shift_clock: Callable[[QueueClient, float], None]
) -> None:
    old = [pushed(queue) for _ in range(3)]
    cutoff = queue.clock()
    shift_clock(queue, 60)
    new = pushed(queue)

    assert queue.cancel_queue(Q, created_before=cutoff, limit=2) == 2
    assert queue.cancel_queue(Q, created_before=cutoff, limit=2) == 1

    assert [queue.result(job_id).state for job_id in old] == ["cancelled"] * 3
    assert queue.result(new).state == "pending"


def test_cancel_queue_checks_its_arguments_before_anything_is_sent(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidLimitError):
        queue.cancel_queue(Q, limit=0)
    with pytest.raises(errors.InvalidNameError):
        queue.cancel_queue("")


@pytest.fixture
def other_namespace(namespace: str) -> str:
    return f"{namespace}-other"


# --------------------------------------------------------------------------------------------
# pause_queue, resume_queue, purge_queue.
# --------------------------------------------------------------------------------------------


def test_a_paused_queue_hands_out_nothing_and_still_accepts_pushes(queue: QueueClient) -> None:
    waiting = pushed(queue)

    assert queue.pause_queue(Q) is True

    assert queue.pull(Q) is None
    assert queue.pull_batch(Q, limit=10) == []
    assert queue.pull_any([Q], limit=10) == []
    accepted = pushed(queue)
    assert live_jobs(queue, Q) == [waiting, accepted]
    elsewhere = pushed(queue, OTHER)
    assert pulled(queue, OTHER).id == elsewhere  # other queues are unaffected


def test_a_resumed_queue_hands_out_its_jobs_again(queue: QueueClient) -> None:
    job_id = pushed(queue)
    queue.pause_queue(Q)

    assert queue.resume_queue(Q) is False

    assert pulled(queue).id == job_id


def test_stats_show_whether_a_queue_is_paused(queue: QueueClient) -> None:
    pushed(queue)
    assert one_stats(queue, Q).paused is False

    queue.pause_queue(Q)
    assert one_stats(queue, Q).paused is True
    assert [s.queue for s in queue.stats() if s.paused] == [Q]

    queue.resume_queue(Q)
    assert one_stats(queue, Q).paused is False


def test_pausing_and_configuring_a_queue_leave_each_others_settings_alone(
    queue: QueueClient,
) -> None:
    queue.configure_queue(Q, max_attempts=3)

    queue.pause_queue(Q)
    assert pushed(queue) and queue.jobs(Q)[0].max_attempts == 3
    policy = queue.configure_queue(Q, max_attempts=4)

    assert (policy.paused, policy.max_attempts) == (True, 4)


def test_configure_queue_changes_the_settings_given_and_keeps_the_others(
    queue: QueueClient,
) -> None:
    queue.configure_queue(Q, max_attempts=3, retain_dead=3600, retain_results=60)

    policy = queue.configure_queue(Q, backoff_base=2)

    assert (policy.max_attempts, policy.retain_dead, policy.retain_results) == (3, 3600.0, 60.0)
    assert policy.backoff_base == 2.0


def test_configure_queue_puts_a_setting_given_as_none_back_to_the_built_in_default(
    queue: QueueClient,
) -> None:
    queue.configure_queue(Q, max_attempts=3, retain_completed=60, backoff_cap=10)

    policy = queue.configure_queue(Q, max_attempts=None, retain_completed=None)

    assert (policy.max_attempts, policy.retain_completed, policy.backoff_cap) == (20, None, 10.0)


def test_configure_queue_in_sql_keeps_what_it_is_not_given_and_resets_what_p_reset_names(
    queue: QueueClient,
) -> None:
    """The same rule as the SDK's and the command line's, for a client in any language."""

    def configure(arguments: str) -> tuple[Any, ...]:
        row = queue.cursor.execute(
            "SELECT p.max_attempts, extract(epoch FROM p.retain_dead)::int, p.concurrency"
            f" FROM postkit_queue.configure_queue(%s, %s, {arguments}) AS p",
            (queue.namespace, Q),
        ).fetchone()
        assert row is not None
        return tuple(row)

    assert configure("p_max_attempts => 3, p_retain_dead => '1 hour', p_concurrency => 2") == (
        3,
        3600,
        2,
    )
    assert configure("p_max_attempts => 5") == (5, 3600, 2)
    assert configure("p_reset => ARRAY['retain_dead', 'concurrency']") == (5, 2592000, None)


def test_configure_queue_in_sql_refuses_an_unknown_setting_to_reset(
    queue: QueueClient,
) -> None:
    with pytest.raises(psycopg.Error, match="cannot reset 'retries'") as raised:
        queue.cursor.execute(
            "SELECT * FROM postkit_queue.configure_queue(%s, %s, p_reset => %s)",
            (queue.namespace, Q, ["retries"]),
        )

    assert raised.value.sqlstate == "PKQ01"


def test_two_updates_of_one_queue_at_once_both_keep_their_change(
    make_client: Callable[[], QueueClient],
    wait_until_blocked: Callable[..., None],
    executor: ThreadPoolExecutor,
) -> None:
    first, second = make_client(), make_client()
    first.configure_queue(Q, max_attempts=3)
    commit(first)

    first.configure_queue(Q, max_attempts=5)  # transaction left open: the row stays locked
    racing = executor.submit(second.configure_queue, Q, retain_dead=600)
    wait_until_blocked(second, first, racing)
    commit(first)

    policy = racing.result(timeout=BLOCK_TIMEOUT)
    commit(second)
    assert (policy.max_attempts, policy.retain_dead) == (5, 600.0)


def test_outcomes_since_counts_each_queues_outcomes_from_the_minute_given(
    queue: QueueClient,
) -> None:
    since = db_clock(queue)
    acked(queue)
    acked(queue)
    bury(queue, OTHER)
    pushed(queue)
    assert queue.nack(pulled(queue, Q), backoff=3600)

    totals = {o.queue: o for o in queue.outcomes_since(since)}

    assert set(totals) == {Q, OTHER}
    assert (totals[Q].completed, totals[Q].dead_lettered, totals[Q].retried) == (2, 0, 1)
    assert (totals[OTHER].completed, totals[OTHER].dead_lettered) == (0, 1)
    assert queue.outcomes_since(since + timedelta(minutes=2)) == []


def test_outcomes_since_needs_an_aware_moment(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidDurationError):
        queue.outcomes_since(datetime(2025, 1, 1))


def test_queues_lists_the_queues_with_jobs_dead_letters_or_settings(queue: QueueClient) -> None:
    pushed(queue, Q)
    bury(queue, OTHER)
    queue.pause_queue("paused_one")

    assert queue.queues() == sorted([Q, OTHER, "paused_one"])


def test_purge_queue_with_a_cutoff_counts_then_deletes_only_jobs_created_by_then(
    queue: QueueClient, conn: psycopg.Connection[Any], make_client: Callable[[], QueueClient]
) -> None:
    queue.push("emails", 1)
    queue.push("emails", 2, delay=3600)
    conn.commit()
    cutoff = queue.clock()
    conn.commit()
    later = make_client()
    late = later.push("emails", 3)
    later.cursor.connection.commit()

    counted = queue.purge_queue("emails", created_before=cutoff, dry_run=True)
    deleted = queue.purge_queue("emails", created_before=cutoff)
    conn.commit()

    assert (counted, deleted) == (2, 2)
    assert [job.id for job in queue.jobs("emails", "pending")] == [late]


def test_a_purge_dry_run_needs_a_cutoff(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidDurationError, match="created_before"):
        queue.purge_queue("emails", dry_run=True)


def test_purge_queue_deletes_pending_and_scheduled_jobs_and_leaves_running_ones(
    queue: QueueClient,
) -> None:
    pushed(queue)
    running = pulled(queue)
    pushed(queue)
    pushed(queue)
    pushed(queue, delay=600)
    elsewhere = pushed(queue, OTHER)

    assert queue.purge_queue(Q) == 3

    assert live_jobs(queue, Q) == [running.id]
    assert live_jobs(queue, OTHER) == [elsewhere]
    assert queue.ack(running)
    assert queue.purge_queue(Q) == 0


# --------------------------------------------------------------------------------------------
# Retention: the completed-jobs archive, dead-letter expiry, and prune.
# --------------------------------------------------------------------------------------------


def archived(client: QueueClient) -> list[dict[str, Any]]:
    client.cursor.execute(
        """
        SELECT job_id, queue, payload::text AS payload, attempts, completed_at, expires_at
        FROM postkit_queue.completed_jobs WHERE namespace = %s ORDER BY job_id
        """,
        (client.namespace,),
    )
    names = [column.name for column in client.cursor.description]
    return [dict(zip(names, row, strict=True)) for row in client.cursor.fetchall()]


def acked(client: QueueClient, queue: str = Q, payload: Any = None) -> int:
    job_id = pushed(client, queue, payload)
    job = pulled(client, queue)
    assert job.id == job_id and client.ack(job)
    return job_id


def test_a_queue_that_retains_completed_jobs_archives_each_ack(queue: QueueClient) -> None:
    policy = queue.configure_queue(Q, retain_completed=60)
    assert policy.retain_completed == 60.0

    job_id = acked(queue, payload={"kept": True})
    acked(queue, OTHER)  # no retention configured: deleted at once

    (row,) = archived(queue)
    assert (row["job_id"], row["queue"], row["payload"], row["attempts"]) == (
        job_id,
        Q,
        '{"kept": true}',
        1,
    )
    assert row["expires_at"] - row["completed_at"] == timedelta(seconds=60)
    assert queue.get_job(job_id) is None  # archived, not live


def test_prune_deletes_archived_jobs_past_their_retention_in_bounded_batches(
    queue: QueueClient, shift_clock: Shift
) -> None:
    queue.configure_queue(Q, retain_completed=60)
    for _ in range(3):
        acked(queue)
    assert queue.prune().completed_jobs == 0  # not expired yet

    shift_clock(queue, 61)

    assert queue.prune(limit=2).completed_jobs == 2
    assert len(archived(queue)) == 1
    assert queue.prune(limit=2).completed_jobs == 1
    assert archived(queue) == []


def test_prune_holds_its_bound_under_a_plan_that_joins_by_nested_loop(
    conn: psycopg.Connection, queue: QueueClient, shift_clock: Shift
) -> None:
    """The plan row-level security brings: a batch read by a subquery that a nested loop runs
    again for each row would take the next rows each time."""
    queue.configure_queue(Q, retain_completed=60, retain_dead=60, retain_results=60)
    for _ in range(3):
        queue.push(Q, {})
        job = queue.pull(Q)
        assert job is not None and queue.ack(job, result={"ok": True})
        queue.push(Q, {})
        job = queue.pull(Q)
        assert job is not None and queue.fail(job, error="x")
    shift_clock(queue, 61)
    conn.execute("SET enable_hashjoin = off")
    conn.execute("SET enable_mergejoin = off")

    pruned = queue.prune(limit=2)

    assert (pruned.completed_jobs, pruned.dead_letters, pruned.results) == (2, 2, 2)


def test_dead_letters_expire_after_the_queues_retain_dead(queue: QueueClient) -> None:
    queue.configure_queue(OTHER, retain_dead=3600)

    bury(queue)
    bury(queue, OTHER)

    expiry = {d.queue: d.expires_at - d.failed_at for d in queue.dead_letters()}
    assert expiry == {Q: timedelta(days=30), OTHER: timedelta(hours=1)}


def test_prune_deletes_expired_dead_letters(queue: QueueClient, shift_clock: Shift) -> None:
    queue.configure_queue(Q, retain_dead=60)
    bury(queue)
    kept = bury(queue, OTHER)  # the default: 30 days

    shift_clock(queue, 61)

    assert queue.prune().dead_letters == 1
    assert dead_ids(queue.dead_letters(include_redriven=True)) == [kept]
    shift_clock(queue, timedelta(days=30, seconds=1).total_seconds())
    assert queue.prune().dead_letters == 1
    assert queue.dead_letters(include_redriven=True) == []


def test_prune_deletes_outcome_counters_older_than_two_hours(
    queue: QueueClient, shift_clock: Shift
) -> None:
    shift_clock(queue, -3 * 3600)
    acked(queue)
    shift_clock(queue, 0)
    acked(queue)

    assert queue.prune().stats_rows == 1

    queue.cursor.execute(
        "SELECT minute FROM postkit_queue.queue_stats WHERE namespace = %s", (queue.namespace,)
    )
    (minute,) = (row[0] for row in queue.cursor.fetchall())
    assert db_clock(queue) - minute < timedelta(minutes=2)
    assert one_stats(queue, Q).completed_last_hour == 1
