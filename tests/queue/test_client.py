"""The article's API, one guarantee per test."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import Job, NackOutcome, QueueClient, executor, protocol
from postkit.queue.consumer import REMEMBERED_CLAIMS
from postkit.queue.protocol import JobRef

Shift = Callable[[QueueClient, float], None]

Q = "emails"
OPERATIONS = ("ack", "nack", "fail", "extend_visibility")
UNKNOWN_JOB_ID = 2**62


def pulled(client: QueueClient, queue: str = Q, **kwargs: Any) -> Job:
    job = client.pull(queue, **kwargs)
    assert job is not None
    return job


def claimed(
    client: QueueClient,
    *,
    worker_id: str | None = "worker-1",
    visibility_timeout: float = 30,
    **push_kwargs: Any,
) -> Job:
    client.push(Q, {"to": "ada@example.com"}, **push_kwargs)
    return pulled(client, worker_id=worker_id, visibility_timeout=visibility_timeout)


def fetched(client: QueueClient, job_id: int | None) -> Job:
    assert job_id is not None
    job = client.get_job(job_id)
    assert job is not None
    return job


def settle(client: QueueClient, operation: str, job: JobRef, **claim: Any) -> bool:
    if operation == "extend_visibility":
        return client.extend_visibility(job, extension=300, **claim)
    method: Callable[..., bool] = getattr(client, operation)
    return method(job, **claim)


def db_clock(client: QueueClient) -> datetime:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now: datetime = client.cursor.fetchone()[0]
    return now


def seconds_until_retry(client: QueueClient, job: Job, **nack_kwargs: Any) -> float:
    before = db_clock(client)
    assert client.nack_outcome(job, **nack_kwargs) is NackOutcome.RETRIED
    after = db_clock(client)
    retried = client.get_job(job.id)
    assert retried is not None and retried.run_at is not None
    # The error entry records the very clock reading the nack computed run_at from.
    nacked_at = datetime.fromisoformat(retried.errors[-1]["at"])
    assert before <= nacked_at <= after
    return (retried.run_at - nacked_at).total_seconds()


def retried_until_attempt(client: QueueClient, attempt: int) -> Job:
    """Pull and nack (with no wait) until the next pull is the given attempt."""
    job = pulled(client)
    while job.attempts < attempt:
        assert client.nack(job, backoff=0)
        job = pulled(client)
    return job


@pytest.fixture
def other(conn: psycopg.Connection, namespace: str) -> QueueClient:
    """A client of another namespace on the same connection: it sees every uncommitted row
    the test writes, so only the namespace can keep it apart."""
    return QueueClient(conn.cursor(), namespace=f"{namespace}-other")


# --------------------------------------------------------------------------------------------
# Push and pull.
# --------------------------------------------------------------------------------------------


def test_push_then_pull_returns_the_payload_and_counts_an_attempt(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    job_id = queue.push("send_otp", {"user_id": "42"})
    conn.commit()

    job = queue.pull("send_otp", worker_id="server-b")

    assert job is not None
    assert (job["id"], job["payload"], job["attempts"]) == (job_id, {"user_id": "42"}, 1)
    assert job["worker_id"] == "server-b" and job["queue"] == "send_otp"


def test_every_pull_counts_an_attempt(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1})

    attempts = []
    for _ in range(3):
        job = pulled(queue)
        attempts.append(job.attempts)
        queue.nack(job, backoff=0)

    assert attempts == [1, 2, 3]
    assert fetched(queue, job.id).attempts == 3


def test_a_claim_rolled_back_was_never_a_claim(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    job_id = queue.push(Q, {"n": 1})
    conn.commit()
    pulled(queue, worker_id="worker-1")
    conn.rollback()

    job = fetched(queue, job_id)
    assert (job.state, job.attempts, job.worker_id, job.claim_token) == ("pending", 0, None, None)
    assert pulled(queue).attempts == 1


def pushed_from_sql(client: QueueClient, payload_text: str) -> int:
    client.cursor.execute(
        "SELECT postkit_queue.push(%s, %s, %s::jsonb)", (client.namespace, Q, payload_text)
    )
    job_id: int = client.cursor.fetchone()[0]
    return job_id


def test_a_payload_python_cannot_decode_comes_back_marked_and_the_batch_with_it(
    queue: QueueClient,
) -> None:
    good = queue.push(Q, {"n": 1})
    deep = pushed_from_sql(queue, "[" * 3000 + "]" * 3000)
    long = pushed_from_sql(queue, '{"n": ' + "9" * 5000 + "}")

    jobs = {job.id: job for job in queue.pull_batch(Q, limit=10)}

    assert set(jobs) == {good, deep, long}
    assert (jobs[good].payload, jobs[good].payload_error) == ({"n": 1}, None)
    for job_id, error in ((deep, "RecursionError"), (long, "ValueError")):
        job = jobs[job_id]
        assert job.payload is None and job.state == "running"
        assert job.payload_error is not None
        assert job.payload_error.startswith(f"payload could not be decoded: {error}: ")
        assert queue.fail(job, error=job.payload_error) is True
        assert fetched(queue, job_id).payload_error == job.payload_error
    assert [dead.job_id for dead in queue.dead_letters(Q) if dead.payload_error] == [long, deep]


def test_pull_returns_a_job_it_cannot_decode_instead_of_raising(queue: QueueClient) -> None:
    job_id = pushed_from_sql(queue, "[" * 3000 + "]" * 3000)

    job = pulled(queue)

    assert (job.id, job.payload) == (job_id, None)
    assert job.payload_error is not None and "RecursionError" in job.payload_error
    assert queue.ack_and_pull(Q, [job], limit=1) == ([job_id], [])


def test_pull_returns_none_on_an_empty_queue(queue: QueueClient) -> None:
    assert queue.pull(Q) is None


def test_pull_takes_jobs_of_the_named_queue_only(queue: QueueClient) -> None:
    queue.push("sms", {"n": 1})

    assert queue.pull(Q) is None


def test_push_rolled_back_with_the_callers_writes_leaves_no_job(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    queue.push("send_otp", {"user_id": "42"})
    conn.rollback()

    assert queue.pull("send_otp") is None


def test_higher_priority_is_pulled_first(queue: QueueClient) -> None:
    for priority in (0, 10, -5, 5):
        queue.push(Q, {"priority": priority}, priority=priority)

    order = [pulled(queue).priority for _ in range(4)]

    assert order == [10, 5, 0, -5]


def test_among_equal_priorities_the_earlier_run_at_is_pulled_first(
    queue: QueueClient, shift_clock: Shift
) -> None:
    later = queue.push(Q, {"n": "later"}, delay=5)
    sooner = queue.push(Q, {"n": "sooner"})
    shift_clock(queue, 10)

    assert [pulled(queue).id for _ in range(2)] == [sooner, later]


def test_among_equal_priority_and_run_at_the_lower_id_is_pulled_first(
    queue: QueueClient, conn: psycopg.Connection, namespace: str
) -> None:
    # One statement: every push reads the same clock, so the jobs share their run_at.
    rows = conn.execute(
        "SELECT postkit_queue.push(%s, %s, to_jsonb(n)) FROM generate_series(1, 3) AS n",
        (namespace, Q),
    ).fetchall()
    ids = [row[0] for row in rows]
    assert len({fetched(queue, job_id).run_at for job_id in ids}) == 1

    assert [pulled(queue).id for _ in range(3)] == sorted(ids)


def test_a_delayed_job_is_not_pulled_before_it_falls_due(
    queue: QueueClient, shift_clock: Shift
) -> None:
    queue.push(Q, {"n": 1}, delay=60)
    shift_clock(queue, 59)

    assert queue.pull(Q) is None


def test_a_delayed_job_is_pulled_once_it_falls_due(queue: QueueClient, shift_clock: Shift) -> None:
    job_id = queue.push(Q, {"n": 1}, delay=timedelta(minutes=1))
    shift_clock(queue, 61)

    assert pulled(queue).id == job_id


def test_max_attempts_defaults_to_20(queue: QueueClient) -> None:
    job_id = queue.push(Q, {"n": 1})

    assert fetched(queue, job_id).max_attempts == 20


def test_max_attempts_given_at_push_is_kept(queue: QueueClient) -> None:
    job_id = queue.push(Q, {"n": 1}, max_attempts=3)

    assert fetched(queue, job_id).max_attempts == 3


def test_a_queue_setting_sets_the_default_max_attempts_and_push_beats_it(
    queue: QueueClient,
) -> None:
    queue.configure_queue(Q, max_attempts=7)

    default = queue.push(Q, {"n": 1})
    explicit = queue.push(Q, {"n": 2}, max_attempts=2)

    assert fetched(queue, default).max_attempts == 7
    assert fetched(queue, explicit).max_attempts == 2


def test_two_workers_never_pull_the_same_job(make_client: Callable[[], QueueClient]) -> None:
    producer, worker_a, worker_b = make_client(), make_client(), make_client()
    producer.push(Q, {"n": 1})
    producer.push(Q, {"n": 2})
    producer.cursor.connection.commit()

    a, b = pulled(worker_a), pulled(worker_b)  # neither commits: both hold their row locks

    assert a.id != b.id
    assert producer.pull(Q) is None


# --------------------------------------------------------------------------------------------
# Deduplication.
# --------------------------------------------------------------------------------------------


def test_unique_key_deduplicates_while_the_job_is_pending(queue: QueueClient) -> None:
    assert queue.push(Q, {"n": 1}, unique_key="otp:42") is not None

    assert queue.push(Q, {"n": 2}, unique_key="otp:42") is None


def test_unique_key_deduplicates_while_the_job_is_running(queue: QueueClient) -> None:
    claimed(queue, unique_key="otp:42")

    assert queue.push(Q, {"n": 2}, unique_key="otp:42") is None


def test_unique_key_is_free_again_after_ack(queue: QueueClient) -> None:
    job = claimed(queue, unique_key="otp:42")
    assert queue.ack(job)

    assert queue.push(Q, {"n": 2}, unique_key="otp:42") is not None


def test_unique_key_is_free_again_after_dead_lettering(queue: QueueClient) -> None:
    job = claimed(queue, unique_key="otp:42")
    assert queue.fail(job, error="bad address")

    assert queue.push(Q, {"n": 2}, unique_key="otp:42") is not None


def test_unique_key_deduplicates_within_one_queue_only(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1}, unique_key="otp:42")

    assert queue.push("sms", {"n": 2}, unique_key="otp:42") is not None


# --------------------------------------------------------------------------------------------
# Fencing: only the current claim settles a job.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", OPERATIONS)
def test_passing_the_job_object_settles_the_job(queue: QueueClient, operation: str) -> None:
    job = claimed(queue)

    assert settle(queue, operation, job) is True
    assert queue.get_job(job.id) != job


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_job_id_with_the_claiming_worker_id_settles_the_job(
    queue: QueueClient, operation: str
) -> None:
    job = claimed(queue, worker_id="worker-1")

    assert settle(queue, operation, job.id, worker_id="worker-1") is True
    assert queue.get_job(job.id) != job


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_wrong_worker_id_settles_nothing(queue: QueueClient, operation: str) -> None:
    job = claimed(queue, worker_id="worker-1")

    assert settle(queue, operation, job.id, worker_id="worker-2") is False
    assert queue.get_job(job.id) == job


@pytest.mark.parametrize("claimed_by", ["worker-1", None], ids=["named-claim", "unnamed-claim"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_wrong_worker_id_settles_nothing_even_with_the_current_token(
    queue: QueueClient, operation: str, claimed_by: str | None
) -> None:
    job = claimed(queue, worker_id=claimed_by)

    assert settle(queue, operation, job, worker_id="intruder") is False
    assert queue.get_job(job.id) == job


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_stale_claim_token_settles_nothing(queue: QueueClient, operation: str) -> None:
    job = claimed(queue, worker_id="worker-1")

    assert settle(queue, operation, job.id, claim_token=uuid.uuid4()) is False
    assert settle(queue, operation, job.id, worker_id="worker-1", claim_token=uuid.uuid4()) is False
    assert queue.get_job(job.id) == job


@pytest.mark.parametrize("second_worker", ["worker-1", "worker-2"], ids=["same", "another"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_the_first_claim_cannot_settle_the_attempt_taken_after_its_rescue(
    queue: QueueClient, shift_clock: Shift, operation: str, second_worker: str
) -> None:
    first = claimed(queue, worker_id="worker-1", visibility_timeout=30)
    shift_clock(queue, 31)
    assert queue.tick_timeouts() == 1
    second = pulled(queue, worker_id=second_worker)

    assert settle(queue, operation, first) is False
    assert queue.get_job(second.id) == second


def test_without_a_token_a_worker_id_cannot_fence_its_own_older_attempt(
    queue: QueueClient, shift_clock: Shift
) -> None:
    # The documented limit of id + worker_id: only the claim token tells two attempts of one
    # worker apart. This pins that trade-off so a change to it is deliberate. (A client that
    # did not pull the job: the one that did would fence on the token it remembers.)
    first = claimed(queue, worker_id="worker-1", visibility_timeout=30)
    shift_clock(queue, 31)
    queue.tick_timeouts()
    pulled(queue, worker_id="worker-1")
    elsewhere = QueueClient(queue.cursor, namespace=queue.namespace)

    assert elsewhere.ack(first.id, worker_id="worker-1") is True


@pytest.mark.parametrize("operation", OPERATIONS)
def test_an_unknown_job_id_settles_nothing(queue: QueueClient, operation: str) -> None:
    assert settle(queue, operation, UNKNOWN_JOB_ID, worker_id="worker-1") is False
    assert settle(queue, operation, UNKNOWN_JOB_ID, claim_token=uuid.uuid4()) is False


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_bare_id_of_a_job_this_client_pulled_settles_that_claim(
    queue: QueueClient, operation: str
) -> None:
    # The article's first example: pull without a worker_id, settle by id.
    queue.push("send_otp", {"user_id": "42"})
    job = pulled(queue, "send_otp")

    assert settle(queue, operation, job["id"]) is True
    assert queue.get_job(job.id) != job


def test_a_client_forgets_the_claim_it_settled(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1})
    job = pulled(queue)
    assert queue.ack(job["id"]) is True

    with pytest.raises(errors.InvalidClaimTokenError):
        queue.ack(job["id"])


def test_a_client_remembers_a_bounded_number_of_claims_and_forgets_the_oldest(
    queue: QueueClient,
) -> None:
    queue.push_batch(Q, list(range(REMEMBERED_CLAIMS + 1)))
    claimed_jobs = [job for _ in range(11) for job in queue.pull_batch(Q, limit=1000)]
    assert len(claimed_jobs) == REMEMBERED_CLAIMS + 1
    oldest, newest = claimed_jobs[0], claimed_jobs[-1]

    with pytest.raises(errors.InvalidClaimTokenError):
        queue.ack(oldest["id"])
    assert queue.ack(newest["id"]) is True


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_stale_workers_bare_id_settles_nothing_after_an_unnamed_rescue(
    make_client: Callable[[], QueueClient], shift_clock: Shift, operation: str
) -> None:
    stale, holder = make_client(), make_client()
    stale.push(Q, {"n": 1})
    first = pulled(stale, visibility_timeout=30)
    stale.cursor.connection.commit()
    shift_clock(holder, 31)
    assert holder.tick_timeouts() == 1
    second = pulled(holder)
    holder.cursor.connection.commit()

    assert settle(stale, operation, first["id"]) is False
    stale.cursor.connection.commit()
    assert settle(holder, operation, second) is True


@pytest.mark.parametrize("operation", OPERATIONS)
def test_in_sql_a_bare_job_id_settles_no_claim(
    queue: QueueClient, conn: psycopg.Connection, namespace: str, operation: str
) -> None:
    job = claimed(queue, worker_id=None)
    conn.commit()
    arguments = {
        "ack": "",
        "nack": ", p_error => 'x'",
        "fail": ", p_error => 'x'",
        "extend_visibility": ", p_extension => interval '1 minute'",
    }[operation]

    with pytest.raises(psycopg.Error) as raised:
        conn.execute(
            f"SELECT postkit_queue.{operation}(%s, p_job_id => %s{arguments})", (namespace, job.id)
        )

    assert raised.value.sqlstate == "PKQ13"
    conn.rollback()
    assert queue.get_job(job.id) == job


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_claim_taken_without_a_worker_id_is_settled_by_its_token_only(
    queue: QueueClient, operation: str
) -> None:
    job = claimed(queue, worker_id=None)

    assert settle(queue, operation, job.id, worker_id="worker-1") is False
    assert settle(queue, operation, job.id, claim_token=job.claim_token) is True


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_settled_job_cannot_be_settled_again(queue: QueueClient, operation: str) -> None:
    job = claimed(queue)
    assert queue.ack(job)

    assert settle(queue, operation, job) is False


def test_a_nack_that_does_not_hold_the_claim_reports_stale(queue: QueueClient) -> None:
    job = claimed(queue, worker_id="worker-1")

    assert queue.nack_outcome(job.id, worker_id="worker-2") is NackOutcome.STALE
    assert queue.nack(job.id, worker_id="worker-2") is False


# --------------------------------------------------------------------------------------------
# Retries and backoff.
# --------------------------------------------------------------------------------------------


def test_nack_returns_the_job_to_pending_with_the_error_recorded(queue: QueueClient) -> None:
    job = claimed(queue, worker_id="worker-1")

    assert queue.nack(job, error="smtp timeout") is True

    after = queue.get_job(job.id)
    assert after is not None
    assert (after.state, after.worker_id, after.claim_token, after.attempts) == (
        "pending",
        None,
        None,
        1,
    )
    assert [(e["attempt"], e["kind"], e["error"], e["worker_id"]) for e in after.errors] == [
        (1, "nack", "smtp timeout", "worker-1")
    ]


def test_the_first_retry_waits_between_one_and_two_seconds(queue: QueueClient) -> None:
    delay = seconds_until_retry(queue, claimed(queue))

    assert 1 <= delay < 2


def test_the_second_retry_waits_twice_as_long(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1})

    delay = seconds_until_retry(queue, retried_until_attempt(queue, 2))

    assert 2 <= delay < 4


def test_the_retry_delay_is_capped_by_backoff_cap(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1}, backoff_base=10, backoff_cap=3)

    assert seconds_until_retry(queue, pulled(queue)) == 3


def test_the_default_backoff_cap_is_one_hour(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1})

    # Attempt 13 would wait 2**12 = 4096 s or more without the cap.
    assert seconds_until_retry(queue, retried_until_attempt(queue, 13)) == 3600


def test_a_late_attempt_with_a_long_base_waits_the_cap_instead_of_overflowing(
    queue: QueueClient,
) -> None:
    queue.push(Q, {"n": 1}, max_attempts=100, backoff_base=10, backoff_cap=60)

    # 10 s * 2**40 is beyond what a PostgreSQL interval can hold.
    assert seconds_until_retry(queue, retried_until_attempt(queue, 45)) == 60


@pytest.mark.parametrize("backoff", [7.5, timedelta(seconds=7.5)], ids=["seconds", "timedelta"])
def test_an_explicit_backoff_is_used_exactly(
    queue: QueueClient, backoff: float | timedelta
) -> None:
    assert seconds_until_retry(queue, claimed(queue), backoff=backoff) == 7.5


def test_a_backoff_base_given_at_push_sets_the_first_retry(queue: QueueClient) -> None:
    delay = seconds_until_retry(queue, claimed(queue, backoff_base=10))

    assert 10 <= delay < 20


def test_a_queue_backoff_base_sets_the_first_retry(queue: QueueClient) -> None:
    queue.configure_queue(Q, backoff_base=100)

    delay = seconds_until_retry(queue, claimed(queue))

    assert 100 <= delay < 200


def test_a_queue_backoff_cap_caps_the_retry(queue: QueueClient) -> None:
    queue.configure_queue(Q, backoff_base=100, backoff_cap=5)

    assert seconds_until_retry(queue, claimed(queue)) == 5


def test_a_backoff_base_given_at_push_beats_the_queue_setting(queue: QueueClient) -> None:
    queue.configure_queue(Q, backoff_base=100)

    delay = seconds_until_retry(queue, claimed(queue, backoff_base=10))

    assert 10 <= delay < 20


def test_a_backoff_cap_given_at_push_beats_the_queue_setting(queue: QueueClient) -> None:
    queue.configure_queue(Q, backoff_base=100, backoff_cap=5)

    assert seconds_until_retry(queue, claimed(queue, backoff_cap=50)) == 50


def test_a_retried_job_is_not_pulled_before_its_backoff_ends(
    queue: QueueClient, shift_clock: Shift
) -> None:
    queue.nack(claimed(queue), backoff=60)
    shift_clock(queue, 59)
    assert queue.pull(Q) is None

    shift_clock(queue, 61)
    assert pulled(queue).attempts == 2


# --------------------------------------------------------------------------------------------
# Dead letters.
# --------------------------------------------------------------------------------------------


def test_nack_outcome_is_retried_while_attempts_remain_then_dead_lettered(
    queue: QueueClient,
) -> None:
    queue.push(Q, {"n": 1}, max_attempts=2)

    first = queue.nack_outcome(pulled(queue), backoff=0)
    second = queue.nack_outcome(pulled(queue), backoff=0)

    assert (first, second) == (NackOutcome.RETRIED, NackOutcome.DEAD_LETTERED)


def test_nack_on_the_last_attempt_dead_letters_with_reason_attempts_exhausted(
    queue: QueueClient,
) -> None:
    job = claimed(queue, max_attempts=1)

    assert queue.nack(job, error="smtp timeout") is True

    [dead] = queue.dead_letters()
    assert (dead.job_id, dead.reason, dead.error) == (job.id, "attempts_exhausted", "smtp timeout")
    assert fetched(queue, job.id).state == "dead"


def test_fail_dead_letters_at_once_with_reason_failed(queue: QueueClient) -> None:
    job = claimed(queue, max_attempts=5)

    assert queue.fail(job, error="bad address") is True

    [dead] = queue.dead_letters()
    assert (dead.job_id, dead.reason, dead.attempts) == (job.id, "failed", 1)
    assert queue.pull(Q) is None


def test_a_dead_letter_keeps_the_error_of_every_attempt(queue: QueueClient) -> None:
    queue.push(Q, {"n": 1})
    queue.nack(pulled(queue, worker_id="w1"), error="e1", backoff=0)
    queue.nack(pulled(queue, worker_id="w2"), error="e2", backoff=0)
    queue.fail(pulled(queue, worker_id="w3"), error="e3")

    [dead] = queue.dead_letters()

    assert [(e["attempt"], e["kind"], e["error"], e["worker_id"]) for e in dead.errors] == [
        (1, "nack", "e1", "w1"),
        (2, "nack", "e2", "w2"),
        (3, "fail", "e3", "w3"),
    ]
    assert dead.error == "e3"


def test_a_dead_letter_keeps_payload_attempts_queue_last_worker_and_timestamps(
    queue: QueueClient,
) -> None:
    payload = {"to": "ada@example.com", "tags": ["otp", 1, None, True]}
    job_id = queue.push(Q, payload, priority=3, max_attempts=9, unique_key="otp:ada")
    queue.nack(pulled(queue, worker_id="w1"), backoff=0)
    last = pulled(queue, worker_id="w2")
    queue.fail(last, error="bad address")
    failed_by_now = db_clock(queue)

    [dead] = queue.dead_letters()

    assert (dead.job_id, dead.queue, dead.payload, dead.attempts, dead.worker_id) == (
        job_id,
        Q,
        payload,
        2,
        "w2",
    )
    assert (dead.priority, dead.max_attempts, dead.unique_key) == (3, 9, "otp:ada")
    assert dead.created_at == last.created_at
    assert last.claimed_at is not None and last.claimed_at < dead.failed_at <= failed_by_now


def test_an_exception_given_as_error_is_recorded_as_type_and_message(queue: QueueClient) -> None:
    queue.fail(claimed(queue), error=ValueError("no such mailbox"))

    assert queue.dead_letters()[0].error == "ValueError: no such mailbox"


def test_dead_letters_are_listed_newest_first(queue: QueueClient) -> None:
    ids = [queue.push(Q, {"n": n}) for n in range(3)]
    jobs = {job.id: job for job in (pulled(queue) for _ in ids)}
    failed_order = [ids[2], ids[0], ids[1]]
    for job_id in failed_order:
        queue.fail(jobs[job_id])

    assert [dead.job_id for dead in queue.dead_letters()] == failed_order[::-1]


def test_dead_letters_limit_keeps_the_newest(queue: QueueClient) -> None:
    failed = []
    for _ in range(3):
        job = claimed(queue)
        queue.fail(job)
        failed.append(job.id)

    assert [dead.job_id for dead in queue.dead_letters(limit=2)] == [failed[2], failed[1]]


def test_dead_letters_filters_by_queue(queue: QueueClient) -> None:
    queue.push("sms", {"n": 1})
    queue.fail(pulled(queue, "sms"))
    email = claimed(queue)
    queue.fail(email)

    assert [dead.job_id for dead in queue.dead_letters(Q)] == [email.id]
    assert [dead.queue for dead in queue.dead_letters("sms")] == ["sms"]
    assert len(queue.dead_letters()) == 2


# --------------------------------------------------------------------------------------------
# Visibility timeouts.
# --------------------------------------------------------------------------------------------


def test_a_job_whose_claims_keep_expiring_is_dead_lettered_as_timed_out(
    queue: QueueClient, shift_clock: Shift
) -> None:
    job_id = queue.push(Q, {"poison": True}, max_attempts=2)
    pulled(queue, worker_id="w1", visibility_timeout=10)
    shift_clock(queue, 11)
    assert queue.tick_timeouts() == 1
    pulled(queue, worker_id="w2", visibility_timeout=10)
    shift_clock(queue, 22)

    assert queue.tick_timeouts() == 1

    [dead] = queue.dead_letters()
    assert (dead.job_id, dead.reason, dead.attempts, dead.worker_id) == (
        job_id,
        "timed_out",
        2,
        "w2",
    )
    assert dead.error is not None and "visibility timeout" in dead.error
    assert [e["kind"] for e in dead.errors] == ["timeout", "timeout"]
    assert queue.pull(Q) is None


def test_tick_timeouts_returns_how_many_claims_it_rescued(
    queue: QueueClient, shift_clock: Shift
) -> None:
    for n in range(3):
        queue.push(Q, {"n": n})
    pulled(queue, visibility_timeout=10)
    pulled(queue, visibility_timeout=10)
    pulled(queue, visibility_timeout=100)
    shift_clock(queue, 11)

    assert queue.tick_timeouts() == 2
    assert queue.tick_timeouts() == 0


def test_tick_timeouts_leaves_a_claim_alone_until_its_deadline(
    queue: QueueClient, shift_clock: Shift
) -> None:
    job = claimed(queue, visibility_timeout=10)
    shift_clock(queue, 9)

    assert queue.tick_timeouts() == 0
    assert queue.get_job(job.id) == job


def test_a_rescued_job_is_pending_again_at_once_with_its_attempt_counted(
    queue: QueueClient, shift_clock: Shift
) -> None:
    job = claimed(queue, worker_id="w1", visibility_timeout=10)
    shift_clock(queue, 11)
    queue.tick_timeouts()

    rescued = queue.get_job(job.id)
    assert rescued is not None
    assert (rescued.state, rescued.attempts, rescued.worker_id) == ("pending", 1, None)
    assert rescued.errors[-1]["kind"] == "timeout"
    assert pulled(queue, worker_id="w2").attempts == 2


def test_extend_visibility_keeps_the_job_past_its_old_deadline(
    queue: QueueClient, make_client: Callable[[], QueueClient], shift_clock: Shift
) -> None:
    job = claimed(queue, visibility_timeout=10)
    assert queue.extend_visibility(job, extension=60)
    queue.cursor.connection.commit()
    ticker = make_client()

    shift_clock(ticker, 11)
    assert ticker.tick_timeouts() == 0
    shift_clock(ticker, 61)
    assert ticker.tick_timeouts() == 1


def test_extend_visibility_never_shortens_a_deadline(queue: QueueClient) -> None:
    job = claimed(queue, visibility_timeout=600)

    assert queue.extend_visibility(job, extension=10) is True
    assert fetched(queue, job.id).visible_until == job.visible_until


def test_a_worker_past_its_deadline_may_still_ack_while_nobody_rescued_the_job(
    queue: QueueClient, shift_clock: Shift
) -> None:
    job = claimed(queue, visibility_timeout=10)
    shift_clock(queue, 11)

    assert queue.ack(job) is True
    assert queue.get_job(job.id) is None
    assert queue.tick_timeouts() == 0


def test_stale_ack_returns_false_after_the_job_was_rescued(
    make_client: Callable[[], QueueClient], shift_clock: Shift
) -> None:
    server_c, server_d, ticker = make_client(), make_client(), make_client()
    server_c.push("send_otp", {"user_id": "1"})
    server_c.cursor.connection.commit()
    job = server_c.pull("send_otp", worker_id="server-c", visibility_timeout=30)
    server_c.cursor.connection.commit()

    shift_clock(ticker, 31)
    assert ticker.tick_timeouts() == 1
    ticker.cursor.connection.commit()
    shift_clock(server_d, 31)
    assert server_d.pull("send_otp", worker_id="server-d") is not None
    server_d.cursor.connection.commit()

    assert job is not None
    assert server_c.ack(job["id"], worker_id="server-c") is False


# --------------------------------------------------------------------------------------------
# Reading jobs.
# --------------------------------------------------------------------------------------------


def test_get_job_sees_a_pending_job(queue: QueueClient) -> None:
    job_id = queue.push(Q, {"n": 1}, priority=4)

    job = fetched(queue, job_id)

    assert (job.id, job.state, job.payload, job.priority, job.attempts) == (
        job_id,
        "pending",
        {"n": 1},
        4,
        0,
    )


def test_get_job_sees_a_running_job_with_its_claim(queue: QueueClient) -> None:
    job = claimed(queue, worker_id="w1")

    seen = queue.get_job(job.id)

    assert seen is not None
    assert (seen.state, seen.worker_id, seen.claim_token) == ("running", "w1", job.claim_token)


def test_get_job_says_a_running_job_whose_claim_ended_has_an_expired_claim(
    queue: QueueClient, shift_clock: Shift
) -> None:
    """No worker holds it any more, yet it stays running until a tick_timeouts rescues it."""
    job = claimed(queue, worker_id="w1")
    assert job.claim_expired is False
    assert queue.get_job(job.id).claim_expired is False  # type: ignore[union-attr]

    shift_clock(queue, 31)  # past the 30-second claim, by the queue's clock
    seen = queue.get_job(job.id)

    assert seen is not None and (seen.state, seen.claim_expired) == ("running", True)


def test_get_job_sees_a_dead_job_with_its_failure_time(queue: QueueClient) -> None:
    job = claimed(queue)
    queue.fail(job, error="bad address")

    seen = queue.get_job(job.id)

    assert seen is not None
    assert (seen.state, seen.payload, seen.errors[-1]["error"]) == (
        "dead",
        job.payload,
        "bad address",
    )
    assert seen.failed_at is not None


def test_get_job_returns_none_for_a_completed_job(queue: QueueClient) -> None:
    job = claimed(queue)
    queue.ack(job)

    assert queue.get_job(job.id) is None


def test_get_job_returns_none_for_an_unknown_id(queue: QueueClient) -> None:
    assert queue.get_job(UNKNOWN_JOB_ID) is None


# --------------------------------------------------------------------------------------------
# Namespaces.
# --------------------------------------------------------------------------------------------


def test_a_namespace_never_pulls_another_namespaces_jobs(
    queue: QueueClient, other: QueueClient
) -> None:
    queue.push(Q, {"n": 1})

    assert other.pull(Q) is None


def test_get_job_returns_none_for_a_job_of_another_namespace(
    queue: QueueClient, other: QueueClient
) -> None:
    job = claimed(queue)

    assert other.get_job(job.id) is None


@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_namespace_cannot_settle_another_namespaces_job(
    queue: QueueClient, other: QueueClient, operation: str
) -> None:
    job = claimed(queue, worker_id="w1")

    assert settle(other, operation, job) is False
    assert settle(other, operation, job.id, worker_id="w1") is False
    assert queue.get_job(job.id) == job


def test_dead_letters_are_listed_in_their_own_namespace_only(
    queue: QueueClient, other: QueueClient
) -> None:
    queue.fail(claimed(queue))

    assert other.dead_letters() == []
    assert other.dead_letters(Q) == []


def test_tick_timeouts_rescues_claims_of_its_own_namespace_only(
    queue: QueueClient, other: QueueClient, shift_clock: Shift
) -> None:
    job = claimed(queue, visibility_timeout=10)
    shift_clock(queue, 11)  # the clock is per session: both clients see it moved

    assert other.tick_timeouts() == 0
    assert queue.get_job(job.id) == dataclasses.replace(job, claim_expired=True)
    assert queue.tick_timeouts() == 1


def test_the_same_unique_key_is_free_in_another_namespace(
    queue: QueueClient, other: QueueClient
) -> None:
    queue.push(Q, {"n": 1}, unique_key="otp:42")

    assert other.push(Q, {"n": 1}, unique_key="otp:42") is not None


# --------------------------------------------------------------------------------------------
# Transactions: the SDK never commits or rolls back.
# --------------------------------------------------------------------------------------------


def test_a_push_is_invisible_to_other_connections_until_the_caller_commits(
    queue: QueueClient, conn: psycopg.Connection, make_client: Callable[[], QueueClient]
) -> None:
    observer = make_client()
    job_id = queue.push(Q, {"n": 1})
    assert job_id is not None

    assert observer.get_job(job_id) is None
    assert observer.pull(Q) is None

    conn.commit()
    assert fetched(observer, job_id).state == "pending"


def test_an_ack_is_invisible_to_other_connections_until_the_caller_commits(
    queue: QueueClient, conn: psycopg.Connection, make_client: Callable[[], QueueClient]
) -> None:
    observer = make_client()
    job = claimed(queue)
    conn.commit()

    assert queue.ack(job)
    assert fetched(observer, job.id).state == "running"

    conn.commit()
    assert observer.get_job(job.id) is None


def test_a_failed_job_stays_claimed_if_the_caller_rolls_back(
    queue: QueueClient, conn: psycopg.Connection
) -> None:
    job = claimed(queue)
    conn.commit()
    queue.fail(job, error="bad address")
    conn.rollback()

    assert queue.get_job(job.id) == job
    assert queue.dead_letters() == []


def test_a_call_committed_asynchronously_turns_synchronous_commit_off_for_its_transaction_only(
    connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> None:
    connection = connect()
    call = protocol.lifecycle.tick_timeouts(namespace, limit=1).committed_asynchronously()

    executor.run(connection.cursor(), call, given_to=None)
    inside = connection.execute("SHOW synchronous_commit").fetchone()
    connection.commit()
    after = connection.execute("SHOW synchronous_commit").fetchone()

    assert (inside, after) == (("off",), ("on",))
