"""Bad input is refused with a readable Postkit error before anything is sent, so the caller's
transaction and its own writes survive it; hostile text is stored and returned untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import psycopg2
import pytest
from psycopg.pq import TransactionStatus

from postkit import errors
from postkit.queue import Job, QueueClient

Q = "emails"
LONG = "x" * 129
BAD_NAMESPACES = ["", "   ", LONG]

Payload = errors.InvalidPayloadError
Name = errors.InvalidNameError
Duration = errors.InvalidDurationError
Attempts = errors.InvalidMaxAttemptsError
Priority = errors.InvalidPriorityError
JobId = errors.InvalidJobIdError
Token = errors.InvalidClaimTokenError
Limit = errors.InvalidLimitError


@dataclass(frozen=True)
class Position:
    """A dead-letter page's cursor, as a web page sends it back."""

    failed_at: datetime
    job_id: int


@dataclass(frozen=True)
class Bad:
    error: type[errors.ValidationError]
    word: str
    """A word the message must contain, so that a person can tell what to fix."""
    call: Callable[[QueueClient, Job], object]


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def nested(depth: int) -> list[Any]:
    """A list nested ``depth`` deep: past the interpreter's recursion limit at 3,000."""
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def as_namespace(namespace: Any) -> Callable[[QueueClient], QueueClient]:
    return lambda client: QueueClient(client.cursor, namespace=namespace)


CASES: dict[str, Bad] = {
    # Payloads.
    "payload-object": Bad(Payload, "payload", lambda q, j: q.push(Q, object())),
    "payload-set": Bad(Payload, "payload", lambda q, j: q.push(Q, {1, 2})),
    "payload-nan": Bad(Payload, "payload", lambda q, j: q.push(Q, {"x": float("nan")})),
    "payload-infinity": Bad(Payload, "payload", lambda q, j: q.push(Q, [float("inf")])),
    "payload-circular": Bad(Payload, "payload", lambda q, j: q.push(Q, circular())),
    "payload-nul-in-value": Bad(Payload, "NUL", lambda q, j: q.push(Q, {"x": "a\u0000b"})),
    "payload-nul-in-key": Bad(Payload, "NUL", lambda q, j: q.push(Q, {"\u0000": 1})),
    "payload-nul-after-backslash": Bad(Payload, "NUL", lambda q, j: q.push(Q, "\\\u0000")),
    "payload-lone-surrogate": Bad(Payload, "surrogate", lambda q, j: q.push(Q, {"x": "\ud800"})),
    "payload-lone-surrogate-key": Bad(Payload, "surrogate", lambda q, j: q.push(Q, {"\udfff": 1})),
    "payload-nested-3000-deep": Bad(Payload, "payload", lambda q, j: q.push(Q, nested(3000))),
    "push-batch-lone-surrogate": Bad(
        Payload, "surrogate", lambda q, j: q.push_batch(Q, [1, "\ud800"])
    ),
    "push-batch-nested-3000-deep": Bad(
        Payload, "payload", lambda q, j: q.push_batch(Q, [1, nested(3000)])
    ),
    # Queue names.
    "queue-empty": Bad(Name, "queue", lambda q, j: q.push("", 1)),
    "queue-blank": Bad(Name, "queue", lambda q, j: q.push(" \t ", 1)),
    "queue-vertical-tab": Bad(Name, "queue", lambda q, j: q.push("\x0b\x0c", 1)),
    "queue-129-chars": Bad(Name, "queue", lambda q, j: q.push(LONG, 1)),
    "queue-none": Bad(Name, "queue", lambda q, j: q.push(None, 1)),
    "queue-int": Bad(Name, "queue", lambda q, j: q.push(7, 1)),
    "queue-nul": Bad(Name, "queue", lambda q, j: q.push("a\u0000", 1)),
    "pull-queue-blank": Bad(Name, "queue", lambda q, j: q.pull(" ")),
    "dead-letters-queue-empty": Bad(Name, "queue", lambda q, j: q.dead_letters("")),
    # Namespaces.
    "namespace-empty": Bad(Name, "namespace", lambda q, j: as_namespace("")(q).push(Q, 1)),
    "namespace-blank": Bad(Name, "namespace", lambda q, j: as_namespace("   ")(q).push(Q, 1)),
    "namespace-129-chars": Bad(Name, "namespace", lambda q, j: as_namespace(LONG)(q).push(Q, 1)),
    "namespace-none": Bad(Name, "namespace", lambda q, j: as_namespace(None)(q).push(Q, 1)),
    "namespace-bytes": Bad(Name, "namespace", lambda q, j: as_namespace(b"ns")(q).push(Q, 1)),
    "namespace-blank-pull": Bad(Name, "namespace", lambda q, j: as_namespace(" ")(q).pull(Q)),
    "namespace-blank-ack": Bad(Name, "namespace", lambda q, j: as_namespace(" ")(q).ack(j)),
    "namespace-blank-get-job": Bad(
        Name, "namespace", lambda q, j: as_namespace(" ")(q).get_job(j.id)
    ),
    "namespace-blank-tick": Bad(
        Name, "namespace", lambda q, j: as_namespace(" ")(q).tick_timeouts()
    ),
    # Worker ids.
    "worker-id-empty": Bad(Name, "worker_id", lambda q, j: q.pull(Q, worker_id="")),
    "worker-id-129-chars": Bad(Name, "worker_id", lambda q, j: q.pull(Q, worker_id=LONG)),
    "worker-id-int": Bad(Name, "worker_id", lambda q, j: q.pull(Q, worker_id=7)),
    "worker-id-empty-ack": Bad(Name, "worker_id", lambda q, j: q.ack(j.id, worker_id="")),
    "worker-id-blank-release": Bad(Name, "worker_id", lambda q, j: q.release(j.id, worker_id=" ")),
    "unique-key-blank": Bad(Name, "unique_key", lambda q, j: q.push(Q, 1, unique_key=" ")),
    # Durations.
    "visibility-timeout-zero": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=0)
    ),
    "visibility-timeout-negative": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=-1)
    ),
    "visibility-timeout-over-12h": Bad(
        Duration,
        "visibility_timeout",
        lambda q, j: q.pull(Q, visibility_timeout=timedelta(hours=12, seconds=1)),
    ),
    "visibility-timeout-str": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout="30")
    ),
    "visibility-timeout-bool": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=True)
    ),
    "visibility-timeout-nan": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=float("nan"))
    ),
    "extension-zero": Bad(Duration, "extension", lambda q, j: q.extend_visibility(j, extension=0)),
    "extension-negative": Bad(
        Duration, "extension", lambda q, j: q.extend_visibility(j, extension=-5)
    ),
    "extension-over-12h": Bad(
        Duration, "extension", lambda q, j: q.extend_visibility(j, extension=43201)
    ),
    "extension-none": Bad(
        Duration, "extension", lambda q, j: q.extend_visibility(j, extension=None)
    ),
    "delay-negative": Bad(Duration, "delay", lambda q, j: q.push(Q, 1, delay=-1)),
    "delay-str": Bad(Duration, "delay", lambda q, j: q.push(Q, 1, delay="soon")),
    "backoff-negative": Bad(Duration, "backoff", lambda q, j: q.nack(j, backoff=-1)),
    "backoff-base-zero": Bad(Duration, "backoff_base", lambda q, j: q.push(Q, 1, backoff_base=0)),
    "queue-visibility-timeout-zero": Bad(
        Duration, "visibility_timeout", lambda q, j: q.configure_queue(Q, visibility_timeout=0)
    ),
    # Attempts.
    "max-attempts-zero": Bad(Attempts, "max_attempts", lambda q, j: q.push(Q, 1, max_attempts=0)),
    "max-attempts-negative": Bad(
        Attempts, "max_attempts", lambda q, j: q.push(Q, 1, max_attempts=-1)
    ),
    "max-attempts-1001": Bad(
        Attempts, "max_attempts", lambda q, j: q.push(Q, 1, max_attempts=1001)
    ),
    "max-attempts-str": Bad(Attempts, "max_attempts", lambda q, j: q.push(Q, 1, max_attempts="3")),
    "max-attempts-float": Bad(
        Attempts, "max_attempts", lambda q, j: q.push(Q, 1, max_attempts=2.5)
    ),
    "queue-max-attempts-zero": Bad(
        Attempts, "max_attempts", lambda q, j: q.configure_queue(Q, max_attempts=0)
    ),
    # Priorities.
    "priority-40000": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=40000)),
    "priority-minus-40000": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=-40000)),
    "priority-2-to-the-40": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=2**40)),
    "priority-str": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority="high")),
    "priority-none": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=None)),
    "priority-bool": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=True)),
    # Job ids and claim tokens.
    "job-id-str": Bad(JobId, "job", lambda q, j: q.ack("1")),
    "job-id-none": Bad(JobId, "job", lambda q, j: q.nack(None)),
    "job-id-float": Bad(JobId, "job", lambda q, j: q.fail(1.5)),
    "job-id-bool": Bad(JobId, "job", lambda q, j: q.extend_visibility(True, extension=10)),
    "job-id-2-to-the-64": Bad(JobId, "job", lambda q, j: q.get_job(2**64)),
    "get-job-id-str": Bad(JobId, "job", lambda q, j: q.get_job("1")),
    "ack-batch-an-id": Bad(JobId, "got int", lambda q, j: q.ack_batch(j.id)),  # type: ignore[arg-type]
    "ack-batch-a-job": Bad(JobId, "got Job", lambda q, j: q.ack_batch(j)),  # type: ignore[arg-type]
    "ack-batch-ids": Bad(JobId, "got an item of type int", lambda q, j: q.ack_batch([j, j.id])),  # type: ignore[list-item]
    "claim-token-not-a-uuid": Bad(
        Token, "claim_token", lambda q, j: q.ack(j.id, claim_token="not-a-uuid")
    ),
    "claim-token-not-a-uuid-fail": Bad(
        Token, "claim_token", lambda q, j: q.fail(j.id, claim_token="1234")
    ),
    # Limits.
    "dead-letters-limit-zero": Bad(Limit, "limit", lambda q, j: q.dead_letters(limit=0)),
    "dead-letters-limit-too-big": Bad(Limit, "limit", lambda q, j: q.dead_letters(limit=10001)),
    "tick-limit-zero": Bad(Limit, "limit", lambda q, j: q.tick_timeouts(limit=0)),
    "tick-limit-str": Bad(Limit, "limit", lambda q, j: q.tick_timeouts(limit="10")),
    # Every limit the SQL module checks, checked by the SDK before it sends anything.
    "priority-99999": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=99999)),
    "priority-32768": Bad(Priority, "priority", lambda q, j: q.push(Q, 1, priority=32768)),
    "batch-priority-minus-32769": Bad(
        Priority, "priority", lambda q, j: q.push_batch(Q, [1], priority=-32769)
    ),
    "schedule-every-over-3650-days": Bad(
        Duration,
        "every",
        lambda q, j: q.create_schedule("s", Q, 1, every=timedelta(days=3650, seconds=1)),
    ),
    "schedule-priority-32768": Bad(
        Priority, "priority", lambda q, j: q.create_schedule("s", Q, 1, every=60, priority=32768)
    ),
    # Values past what Python's own types hold, or that no text column stores.
    "batch-priority-none": Bad(
        Priority,
        "priority",
        lambda q, j: q.push_batch(Q, [1], priority=None),  # type: ignore[arg-type]
    ),
    "schedule-priority-none": Bad(
        Priority,
        "priority",
        lambda q, j: q.create_schedule("s", Q, 1, every=60, priority=None),  # type: ignore[arg-type]
    ),
    "schedule-every-2-to-the-70": Bad(
        Duration, "too long", lambda q, j: q.create_schedule("s", Q, 1, every=2**70)
    ),
    "schedule-every-minus-2-to-the-63": Bad(
        errors.InvalidScheduleError,
        "every second",
        lambda q, j: q.create_schedule("s", Q, 1, every=-(2**63)),
    ),
    "dead-letters-after-an-id": Bad(
        errors.InvalidStateError,
        "DeadLetter",
        lambda q, j: q.dead_letters(after=j.id),  # type: ignore[arg-type]
    ),
    "dead-letters-after-a-naive-time": Bad(
        Duration,
        "failed_at",
        lambda q, j: q.dead_letters(after=Position(datetime(2026, 1, 1), 1)),
    ),
    "search-dead-letters-after-a-str-id": Bad(
        JobId,
        "job",
        lambda q, j: q.search_dead_letters("x", after=Position(datetime.now(timezone.utc), "1")),  # type: ignore[arg-type]
    ),
    "redrive-job-ids-an-id": Bad(JobId, "got int", lambda q, j: q.redrive(job_ids=j.id)),  # type: ignore[arg-type]
    "error-contains-lone-surrogate": Bad(
        Name, "surrogate", lambda q, j: q.dead_letters(error_contains="\ud800")
    ),
    "batch-max-attempts-1001": Bad(
        Attempts, "max_attempts", lambda q, j: q.push_batch(Q, [1], max_attempts=1001)
    ),
    "queue-no-break-spaces": Bad(Name, "blank", lambda q, j: q.push("\u00a0\u00a0", 1)),
    "queue-ideographic-space": Bad(Name, "blank", lambda q, j: q.push("\u3000", 1)),
    "queue-zero-width-space": Bad(Name, "U+200B", lambda q, j: q.push("\u200b", 1)),
    "queue-zero-width-joiner": Bad(Name, "U+200D", lambda q, j: q.push("a\u200db", 1)),
    "queue-byte-order-mark": Bad(Name, "U+FEFF", lambda q, j: q.push("\ufeffemails", 1)),
    "queue-bidi-override": Bad(Name, "U+202E", lambda q, j: q.push("\u202eevil", 1)),
    "queue-newline": Bad(Name, "U+000A", lambda q, j: q.push("a\nb", 1)),
    "queue-escape-sequence": Bad(Name, "U+001B", lambda q, j: q.push("\x1b[31mred", 1)),
    "queue-lone-surrogate": Bad(Name, "queue", lambda q, j: q.push("a\ud800", 1)),
    "namespace-tab": Bad(Name, "namespace", lambda q, j: as_namespace("a\tb")(q).push(Q, 1)),
    "worker-id-no-break-space": Bad(Name, "worker_id", lambda q, j: q.pull(Q, worker_id="\u00a0")),
    "unique-key-zero-width": Bad(
        Name, "unique_key", lambda q, j: q.push(Q, 1, unique_key="\u200b")
    ),
    "batch-unique-key-control": Bad(
        Name, "unique_key", lambda q, j: q.push_batch(Q, [1], unique_keys=["\x07"])
    ),
    "batch-unique-keys-too-few": Bad(
        Name, "unique keys", lambda q, j: q.push_batch(Q, [1, 2], unique_keys=["a"])
    ),
    "batch-too-many-payloads": Bad(Limit, "100000", lambda q, j: q.push_batch(Q, [0] * 100_001)),
    "pull-any-queue-blank": Bad(Name, "queue", lambda q, j: q.pull_any([Q, " "])),
    "redrive-to-queue-blank": Bad(Name, "to_queue", lambda q, j: q.redrive(to_queue="\u00a0")),
    "visibility-timeout-12h-and-a-microsecond": Bad(
        Duration,
        "visibility_timeout",
        lambda q, j: q.pull(Q, visibility_timeout=timedelta(hours=12, microseconds=1)),
    ),
    "visibility-timeout-rounds-to-zero": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=1e-7)
    ),
    "visibility-timeout-1e308": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull(Q, visibility_timeout=1e308)
    ),
    "pull-any-visibility-timeout-zero": Bad(
        Duration, "visibility_timeout", lambda q, j: q.pull_any([Q], visibility_timeout=0)
    ),
    "delay-over-3650-days": Bad(
        Duration, "delay", lambda q, j: q.push(Q, 1, delay=timedelta(days=3650, seconds=1))
    ),
    "batch-delay-negative": Bad(Duration, "delay", lambda q, j: q.push_batch(Q, [1], delay=-1)),
    "backoff-over-30-days": Bad(
        Duration, "backoff", lambda q, j: q.nack(j, backoff=timedelta(days=30, seconds=1))
    ),
    "backoff-base-over-a-day": Bad(
        Duration, "backoff_base", lambda q, j: q.push(Q, 1, backoff_base=86401)
    ),
    "backoff-cap-zero": Bad(Duration, "backoff_cap", lambda q, j: q.push(Q, 1, backoff_cap=0)),
    "queue-retain-dead-negative": Bad(
        Duration, "retain_dead", lambda q, j: q.configure_queue(Q, retain_dead=-1)
    ),
    "queue-retain-completed-zero": Bad(
        Duration, "retain_completed", lambda q, j: q.configure_queue(Q, retain_completed=0)
    ),
    "queue-backoff-cap-over-30-days": Bad(
        Duration,
        "backoff_cap",
        lambda q, j: q.configure_queue(Q, backoff_cap=timedelta(days=31)),
    ),
    "purge-older-than-negative": Bad(
        Duration, "older_than", lambda q, j: q.purge_dead_letters(older_than=-1)
    ),
    "queue-max-payload-bytes-zero": Bad(
        Payload, "max_payload_bytes", lambda q, j: q.configure_queue(Q, max_payload_bytes=0)
    ),
    "queue-max-payload-bytes-over-100-mib": Bad(
        Payload,
        "max_payload_bytes",
        lambda q, j: q.configure_queue(Q, max_payload_bytes=104_857_601),
    ),
    "pull-batch-limit-1001": Bad(Limit, "limit", lambda q, j: q.pull_batch(Q, limit=1001)),
    "pull-any-limit-zero": Bad(Limit, "limit", lambda q, j: q.pull_any([Q], limit=0)),
    "ack-and-pull-limit-1001": Bad(Limit, "limit", lambda q, j: q.ack_and_pull(Q, [], limit=1001)),
    "tick-limit-100001": Bad(Limit, "limit", lambda q, j: q.tick_timeouts(limit=100_001)),
    "stats-cap-zero": Bad(Limit, "cap", lambda q, j: q.stats(cap=0)),
    "jobs-limit-10001": Bad(Limit, "limit", lambda q, j: q.jobs(Q, limit=10_001)),
    "jobs-state-unknown": Bad(errors.InvalidStateError, "state", lambda q, j: q.jobs(Q, "done")),
    "redrive-limit-zero": Bad(Limit, "limit", lambda q, j: q.redrive(limit=0)),
    "prune-limit-100001": Bad(Limit, "limit", lambda q, j: q.prune(limit=100_001)),
    "tick-schedules-limit-zero": Bad(Limit, "limit", lambda q, j: q.tick_schedules(limit=0)),
    # A bare job id names no claim, unless this client pulled that job.
    "ack-bare-id-of-a-job-this-client-did-not-pull": Bad(
        Token, "claim token", lambda q, j: QueueClient(q.cursor, namespace=q.namespace).ack(j.id)
    ),
    "nack-bare-id-of-a-job-this-client-did-not-pull": Bad(
        Token, "claim token", lambda q, j: QueueClient(q.cursor, namespace=q.namespace).nack(j.id)
    ),
    "release-bare-id-of-a-job-this-client-did-not-pull": Bad(
        Token,
        "claim token",
        lambda q, j: QueueClient(q.cursor, namespace=q.namespace).release(j.id),
    ),
    "ack-many-a-job-never-claimed": Bad(
        Token, "claim token", lambda q, j: q.ack_many([replace(j, claim_token=None)])
    ),
}


@pytest.fixture
def observer(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """A connection of its own, autocommit: it sees only what was committed."""
    return connect(autocommit=True)


@pytest.fixture
def app_table(connect: Callable[..., psycopg.Connection]) -> str:
    """A table of the application's own, beside the queue."""
    with connect(autocommit=True) as admin:
        admin.execute("CREATE TABLE IF NOT EXISTS app_writes (namespace text, note text)")
    return "app_writes"


@pytest.fixture
def running_job(queue: QueueClient, conn: psycopg.Connection) -> Job:
    """A committed running job, and a committed pending one a wrongly accepted pull would
    claim: every bad call has something to damage."""
    queue.push(Q, {"n": 1}, priority=1)
    queue.push(Q, {"n": 2})
    job = queue.pull(Q, worker_id="worker-1")
    assert job is not None
    conn.commit()
    return job


def snapshot(observer: psycopg.Connection, namespace: str) -> list[tuple[str, str]]:
    namespaces = [namespace, *BAD_NAMESPACES]
    rows = observer.execute(
        """
        SELECT 'job', to_jsonb(j)::text FROM postkit_queue.jobs j WHERE namespace = ANY(%(ns)s)
        UNION ALL
        SELECT 'dead', to_jsonb(d)::text FROM postkit_queue.dead_letters d
        WHERE namespace = ANY(%(ns)s)
        UNION ALL
        SELECT 'settings', to_jsonb(s)::text FROM postkit_queue.queue_settings s
        WHERE namespace = ANY(%(ns)s)
        ORDER BY 1, 2
        """,
        {"ns": namespaces},
    ).fetchall()
    return [(kind, row) for kind, row in rows]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_bad_input_is_refused_before_anything_is_sent_and_the_callers_own_writes_commit(
    queue: QueueClient,
    conn: psycopg.Connection,
    observer: psycopg.Connection,
    namespace: str,
    running_job: Job,
    app_table: str,
    case: Bad,
) -> None:
    before = snapshot(observer, namespace)
    conn.execute("INSERT INTO app_writes VALUES (%s, 'the application''s own write')", (namespace,))

    with pytest.raises(case.error) as raised:
        case.call(queue, running_job)

    assert isinstance(raised.value, errors.PostkitError)
    assert case.word in str(raised.value)
    assert not str(raised.value).startswith("postkit:")
    assert conn.info.transaction_status == TransactionStatus.INTRANS  # not aborted
    conn.commit()
    written = observer.execute("SELECT note FROM app_writes WHERE namespace = %s", (namespace,))
    assert written.fetchall() == [("the application's own write",)]
    assert snapshot(observer, namespace) == before
    assert len(before) == 2


def closed_psycopg_cursor(conn: psycopg.Connection) -> Any:
    cursor = conn.cursor()
    cursor.close()
    return cursor


def closed_psycopg_connection(conn: psycopg.Connection) -> Any:
    cursor = conn.cursor()
    conn.close()
    return cursor


def closed_psycopg2_cursor(conn: psycopg.Connection) -> Any:
    other = psycopg2.connect(conn.info.dsn)
    cursor = other.cursor()
    cursor.close()
    return cursor


def closed_psycopg2_connection(conn: psycopg.Connection) -> Any:
    other = psycopg2.connect(conn.info.dsn)
    cursor = other.cursor()
    other.close()
    return cursor


@pytest.mark.parametrize(
    "closed_cursor",
    [
        closed_psycopg_cursor,
        closed_psycopg_connection,
        closed_psycopg2_cursor,
        closed_psycopg2_connection,
    ],
    ids=["psycopg-cursor", "psycopg-connection", "psycopg2-cursor", "psycopg2-connection"],
)
def test_a_closed_cursor_or_connection_raises_client_closed(
    connect: Callable[..., psycopg.Connection],
    observer: psycopg.Connection,
    namespace: str,
    closed_cursor: Callable[[psycopg.Connection], Any],
) -> None:
    client = QueueClient(closed_cursor(connect()), namespace=namespace)

    with pytest.raises(errors.ClientClosedError, match="closed") as raised:
        client.push(Q, {"n": 1})

    assert isinstance(raised.value, errors.PostkitError)
    assert snapshot(observer, namespace) == []


# --------------------------------------------------------------------------------------------
# Hostile text.
# --------------------------------------------------------------------------------------------

HOSTILE = {
    "drop-table": "'; DROP TABLE postkit_queue.jobs; --",
    "bobby-tables": "Robert'); DROP TABLE students;--",
    "dollar-quotes": "$$; SELECT 1; $$",
    "backslash-quote": "\\' OR 1=1 --",
    "cjk-and-emoji": "名前🚀",
    "pyformat-placeholder": "%(namespace)s",
    "format-placeholder": "%s",
    "braces": "{}",
    "escaped-nul-text": "\\u0000",
    # Once refused as blank: E'\v' in SQL is the letter v, not a vertical tab.
    "letter-v": "v",
}


# Floats whose value is an integer, around and past 2^53 where json.dumps switches to an
# exponent, beside ints of the same size and ordinary floats.
FLOATS = [2.0**53 - 1, 2.0**53, 2.0**53 + 2, 1e16, 2.5e16, -2.5e16, 1.2345678901234568e17]
FLOATS += [1e300, 3.0, 0.1, 1e-07, 1.5e-300]
INTS = [2**53 - 1, 2**53, 2**53 + 1, 10**16, 25 * 10**15, 10**40, -(2**63)]


def types(value: Any) -> Any:
    """``value``'s shape with each number replaced by its type's name."""
    if isinstance(value, dict):
        return {key: types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [types(item) for item in value]
    return type(value).__name__


@pytest.mark.parametrize("push", ["push", "push_batch"])
def test_numbers_come_back_with_the_type_and_value_they_were_pushed_with(
    queue: QueueClient, push: str
) -> None:
    payload = {"floats": FLOATS, "ints": INTS, "nested": [{"at": 2.5e16, "n": 2**53 + 1}]}
    if push == "push":
        queue.push(Q, payload)
    else:
        queue.push_batch(Q, [payload])

    job = queue.pull(Q)

    assert job is not None
    assert job.payload == payload
    assert types(job.payload) == types(payload)


def test_a_negative_zero_comes_back_as_zero_since_postgresql_has_none(queue: QueueClient) -> None:
    queue.push(Q, {"z": -0.0})

    job = queue.pull(Q)

    assert job is not None
    assert repr(job.payload["z"]) == "0.0"


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_text_round_trips_untouched(
    connect: Callable[..., psycopg.Connection],
    observer: psycopg.Connection,
    namespace: str,
    text: str,
) -> None:
    conn = connect()
    hostile_namespace = f"{namespace}{text}"
    client = QueueClient(conn.cursor(), namespace=hostile_namespace)
    payload = {text: text, "list": [text]}

    job_id = client.push(text, payload, unique_key=text)
    job = client.pull(text, worker_id=text)
    assert job is not None
    assert (job.id, job.namespace, job.queue, job.worker_id, job.unique_key, job.payload) == (
        job_id,
        hostile_namespace,
        text,
        text,
        text,
        payload,
    )
    assert client.fail(job, error=text)
    conn.commit()

    dead_job = client.get_job(job.id)
    [letter] = client.dead_letters(text)
    assert dead_job is not None
    assert (dead_job.state, dead_job.payload, dead_job.errors[-1]["error"]) == (
        "dead",
        payload,
        text,
    )
    assert (letter.namespace, letter.queue, letter.worker_id, letter.unique_key) == (
        hostile_namespace,
        text,
        text,
        text,
    )
    assert (letter.payload, letter.error, letter.errors[-1]["worker_id"]) == (payload, text, text)
    stored = observer.execute(
        "SELECT queue, worker_id, unique_key, error, payload::text FROM postkit_queue.dead_letters"
        " WHERE namespace = %s",
        (hostile_namespace,),
    ).fetchall()
    assert [(*row[:4], json.loads(row[4])) for row in stored] == [(text, text, text, text, payload)]
    assert observer.execute("SELECT to_regclass('postkit_queue.jobs')").fetchone() != (None,)


def count_jobs(connect: Callable[..., psycopg.Connection], namespace: str) -> int:
    with connect() as observer:
        row = observer.execute(
            "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s", (namespace,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_a_payload_over_the_default_limit_of_one_mebibyte_is_refused_and_nothing_written(
    queue: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    huge = {"blob": "x" * (1024 * 1024 + 1)}

    with pytest.raises(errors.InvalidPayloadError, match="max_payload_bytes"):
        queue.push(Q, huge)
    queue.cursor.connection.rollback()

    assert count_jobs(connect, namespace) == 0


def test_a_queue_can_lower_its_payload_limit_and_push_batch_honours_it(
    queue: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    policy = queue.configure_queue(Q, max_payload_bytes=100)
    queue.cursor.connection.commit()

    with pytest.raises(errors.InvalidPayloadError, match="at most 100"):
        queue.push_batch(Q, [{"small": 1}, {"large": "y" * 200}])
    queue.cursor.connection.rollback()

    assert policy.max_payload_bytes == 100
    assert count_jobs(connect, namespace) == 0
    assert queue.push(Q, {"small": 1}) is not None


def test_a_push_to_a_queue_with_a_settings_row_honours_its_payload_limit_and_attempts(
    queue: QueueClient, connect: Callable[..., psycopg.Connection], namespace: str
) -> None:
    """The common push reads the queue's settings row itself, without queue_policy."""
    queue.configure_queue(Q, max_payload_bytes=100, max_attempts=3)
    queue.cursor.connection.commit()

    with pytest.raises(errors.InvalidPayloadError, match="at most 100"):
        queue.push(Q, {"large": "y" * 200})
    queue.cursor.connection.rollback()
    assert count_jobs(connect, namespace) == 0

    job_id = queue.push(Q, {"small": 1})
    assert job_id is not None
    job = queue.get_job(job_id)
    assert job is not None and job.max_attempts == 3


def test_a_payload_limit_out_of_range_is_refused(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidPayloadError, match="max_payload_bytes"):
        queue.configure_queue(Q, max_payload_bytes=0)


NAMES = [
    "a",
    "\u00a0\u3000",
    "a\u00a0b",
    "\u200b",
    "a\u200db",
    "\ufeff",
    "\x1b[0m",
    "a\U000e0041",
    "v",
    "vvv",
    " a ",
    "\x0b",
    " \t\n\r\x0c\x0b",
    "\x0bv",
    "\u00a0",
    "\u3000",
    "名前",
    "x" * 128,
    "x" * 129,
    " " * 128 + "x",
    "",
]


@pytest.mark.parametrize("name", NAMES, ids=[repr(name)[:20] for name in NAMES])
def test_the_fast_path_name_rule_agrees_with_check_name(
    observer: psycopg.Connection, name: str
) -> None:
    """push, pull and the other hot calls skip check_name when is_name holds; the two must
    accept exactly the same names."""
    [fast] = observer.execute("SELECT postkit_queue.is_name(%s)", (name,)).fetchone() or [None]
    try:
        observer.execute("SELECT postkit_queue.check_name('queue', %s, true)", (name,))
        accepted = True
    except psycopg.Error as error:
        assert error.sqlstate == "PKQ01"
        accepted = False
    assert fast is accepted


# --------------------------------------------------------------------------------------------
# The SQL module's own checks, for callers in any language.
# --------------------------------------------------------------------------------------------

# Compares as 11 hours (PostgreSQL normalizes a year to 360 days), but moves a time back about
# five days: a claim born expired, a dead letter pruned at once.
BACKWARDS = "interval '-1 years +360 days 11:00:00'"
TOKENS = "'{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}'::uuid[]"

SQL_CASES: dict[str, tuple[str, str, str]] = {
    # name: (statement, SQLSTATE, a word of the message)
    **{
        f"{function}-{argument}": (
            f"SELECT postkit_queue.{function}(%(ns)s, {arguments}p_{argument} => {BACKWARDS})",
            "PKQ05",
            argument,
        )
        for function, arguments, argument in [
            ("push", "'q', '1', ", "delay"),
            ("push", "'q', '1', ", "backoff_base"),
            ("push", "'q', '1', ", "backoff_cap"),
            ("push_batch", "'q', '[1]', ", "delay"),
            ("pull", "'q', ", "visibility_timeout"),
            ("pull_any", "'{q}', ", "visibility_timeout"),
            ("nack", "1, p_worker_id => 'w', ", "backoff"),
            ("extend_visibility", "1, p_worker_id => 'w', ", "extension"),
            ("configure_queue", "'q', ", "visibility_timeout"),
            ("configure_queue", "'q', ", "backoff_base"),
            ("configure_queue", "'q', ", "backoff_cap"),
            ("configure_queue", "'q', ", "retain_completed"),
            ("configure_queue", "'q', ", "retain_dead"),
            ("purge_dead_letters", "", "older_than"),
            ("save_schedule", "'s', 'q', '{}', now() + interval '1 minute', ", "every"),
        ]
    },
    # At most the limit with a month as 30 days, as intervals compare; past it with a month's
    # longest, 31 days: the clock would move further than the limit from some day.
    **{
        f"{function}-{argument}-months-past-the-limit": (
            f"SELECT postkit_queue.{function}(%(ns)s, {arguments}p_{argument} => "
            f"interval '{months}')",
            "PKQ05",
            "too long",
        )
        for function, arguments, argument, months in [
            ("push", "'q', '1', ", "delay", "10 years 50 days"),
            ("push_batch", "'q', '[1]', ", "delay", "10 years 50 days"),
            ("push", "'q', '1', ", "backoff_cap", "1 month"),
            ("nack", "1, p_worker_id => 'w', ", "backoff", "1 month"),
            ("configure_queue", "'q', ", "backoff_cap", "1 month"),
            ("configure_queue", "'q', ", "retain_completed", "10 years 50 days"),
            ("configure_queue", "'q', ", "retain_dead", "10 years 50 days"),
            ("purge_dead_letters", "", "older_than", "10 years 50 days"),
        ]
    },
    "push-delay-negative-months": (
        "SELECT postkit_queue.push(%(ns)s, 'q', '1', p_delay => interval '-1 month +31 days')",
        "PKQ05",
        "delay",
    ),
    "extend-visibility-negative-time": (
        "SELECT postkit_queue.extend_visibility(%(ns)s, 1, interval '1 day -23 hours', 'w')",
        "PKQ05",
        "extension",
    ),
    "push-batch-unique-keys-two-dimensional": (
        "SELECT count(*) FROM postkit_queue.push_batch(%(ns)s, 'q', '[1, 2]', "
        "p_unique_keys => '{{a},{b}}')",
        "PKQ01",
        "unique_keys",
    ),
    "push-batch-unique-keys-from-zero": (
        "SELECT count(*) FROM postkit_queue.push_batch(%(ns)s, 'q', '[1, 2]', "
        "p_unique_keys => '[0:1]={a,b}')",
        "PKQ01",
        "unique_keys",
    ),
    "ack-many-job-ids-two-dimensional": (
        f"SELECT postkit_queue.ack_many(%(ns)s, '{{{{1}},{{2}}}}', {TOKENS})",
        "PKQ06",
        "job_ids",
    ),
    "ack-many-job-ids-from-zero": (
        f"SELECT postkit_queue.ack_many(%(ns)s, '[0:1]={{1,2}}', {TOKENS})",
        "PKQ06",
        "job_ids",
    ),
    "ack-many-a-null-token": (
        "SELECT postkit_queue.ack_many(%(ns)s, '{1,2}', "
        "'{00000000-0000-0000-0000-000000000001,NULL}')",
        "PKQ13",
        "claim_tokens",
    ),
    "ack-batch-a-null-job-id": (
        f"SELECT postkit_queue.ack_batch(%(ns)s, '{{1,NULL}}', {TOKENS})",
        "PKQ06",
        "job_ids",
    ),
    "ack-batch-tokens-from-two": (
        "SELECT postkit_queue.ack_batch(%(ns)s, '{1,2}', "
        "'[2:3]={00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}')",
        "PKQ13",
        "claim_tokens",
    ),
    "pull-any-queues-two-dimensional": (
        "SELECT count(*) FROM postkit_queue.pull_any(%(ns)s, '{{a},{b}}')",
        "PKQ01",
        "queues",
    ),
    "queue-no-break-space": (
        "SELECT postkit_queue.push(%(ns)s, E'\\u00a0', '1')",
        "PKQ01",
        "blank",
    ),
    "queue-zero-width-space": (
        "SELECT postkit_queue.push(%(ns)s, E'\\u200b', '1')",
        "PKQ01",
        "U+200B",
    ),
    "worker-id-escape": (
        "SELECT count(*) FROM postkit_queue.pull(%(ns)s, 'q', E'\\x1b[0m')",
        "PKQ01",
        "U+001B",
    ),
    "set-paused-null": ("SELECT postkit_queue.set_paused(%(ns)s, 'q', NULL)", "PKQ09", "paused"),
    "ack-a-bare-job-id": ("SELECT postkit_queue.ack(%(ns)s, 1)", "PKQ13", "claim token"),
    "release-a-bare-job-id": ("SELECT postkit_queue.release(%(ns)s, 1)", "PKQ13", "claim token"),
}


@pytest.mark.parametrize(("statement", "sqlstate", "word"), SQL_CASES.values(), ids=SQL_CASES)
def test_the_sql_functions_refuse_bad_arguments_with_a_postkit_error_naming_them(
    observer: psycopg.Connection, namespace: str, statement: str, sqlstate: str, word: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        observer.execute(statement, {"ns": namespace})

    assert raised.value.sqlstate == sqlstate
    assert word in (raised.value.diag.message_primary or "")
    assert snapshot(observer, namespace) == []


def test_a_payload_read_compressed_from_a_table_is_measured_at_its_real_size(
    observer: psycopg.Connection, namespace: str
) -> None:
    observer.execute("CREATE TEMPORARY TABLE big (value jsonb)")
    # Two million times the same letter: stored compressed in a few kilobytes.
    observer.execute("INSERT INTO big SELECT jsonb_build_object('x', repeat('x', 2000000))")
    [[stored]] = observer.execute("SELECT pg_column_size(value) FROM big").fetchall()
    assert stored < 1024 * 1024

    with pytest.raises(psycopg.Error) as raised:
        observer.execute(
            "SELECT postkit_queue.push(%s, 'q', (SELECT value FROM big))", (namespace,)
        )

    assert raised.value.sqlstate == "PKQ02"
    assert "2000017 bytes" in (raised.value.diag.message_primary or "")
    assert snapshot(observer, namespace) == []


CONTROL_TEXT = {"newline-and-tab": "a\nb\tc", "right-to-left-override": "\u202eevil\u202c"}


@pytest.mark.parametrize("text", CONTROL_TEXT.values(), ids=CONTROL_TEXT.keys())
def test_control_characters_refused_in_names_round_trip_in_payloads_and_errors(
    queue: QueueClient, text: str
) -> None:
    with pytest.raises(errors.InvalidNameError):
        queue.push(text, 1)
    queue.push(Q, {text: [text]})
    job = queue.pull(Q)
    assert job is not None and job.payload == {text: [text]}

    assert queue.fail(job, error=text)
    [letter] = queue.dead_letters(Q)
    assert (letter.payload, letter.error) == ({text: [text]}, text)
