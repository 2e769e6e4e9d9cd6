"""Bad input is refused with a readable Postkit error and leaves the database as it was;
hostile text is stored and returned untouched."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
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
PY = "python"  # refused by the SDK before any SQL is sent
SQL = "sql"  # refused by the SQL module, which aborts the caller's transaction

Payload = errors.InvalidPayloadError
Name = errors.InvalidNameError
Duration = errors.InvalidDurationError
Attempts = errors.InvalidMaxAttemptsError
Priority = errors.InvalidPriorityError
JobId = errors.InvalidJobIdError
Token = errors.InvalidClaimTokenError
Limit = errors.InvalidLimitError


@dataclass(frozen=True)
class Bad:
    error: type[errors.ValidationError]
    word: str
    """A word the message must contain, so that a person can tell what to fix."""
    refused_by: str
    call: Callable[[QueueClient, Job], object]


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def as_namespace(namespace: Any) -> Callable[[QueueClient], QueueClient]:
    return lambda client: QueueClient(client.cursor, namespace=namespace)


CASES: dict[str, Bad] = {
    # Payloads.
    "payload-object": Bad(Payload, "payload", PY, lambda q, j: q.push(Q, object())),
    "payload-set": Bad(Payload, "payload", PY, lambda q, j: q.push(Q, {1, 2})),
    "payload-nan": Bad(Payload, "payload", PY, lambda q, j: q.push(Q, {"x": float("nan")})),
    "payload-infinity": Bad(Payload, "payload", PY, lambda q, j: q.push(Q, [float("inf")])),
    "payload-circular": Bad(Payload, "payload", PY, lambda q, j: q.push(Q, circular())),
    "payload-nul-in-value": Bad(Payload, "NUL", PY, lambda q, j: q.push(Q, {"x": "a\u0000b"})),
    "payload-nul-in-key": Bad(Payload, "NUL", PY, lambda q, j: q.push(Q, {"\u0000": 1})),
    "payload-nul-after-backslash": Bad(Payload, "NUL", PY, lambda q, j: q.push(Q, "\\\u0000")),
    # Queue names.
    "queue-empty": Bad(Name, "queue", SQL, lambda q, j: q.push("", 1)),
    "queue-blank": Bad(Name, "queue", SQL, lambda q, j: q.push(" \t ", 1)),
    "queue-vertical-tab": Bad(Name, "queue", SQL, lambda q, j: q.push("\x0b\x0c", 1)),
    "queue-129-chars": Bad(Name, "queue", SQL, lambda q, j: q.push(LONG, 1)),
    "queue-none": Bad(Name, "queue", PY, lambda q, j: q.push(None, 1)),
    "queue-int": Bad(Name, "queue", PY, lambda q, j: q.push(7, 1)),
    "queue-nul": Bad(Name, "queue", PY, lambda q, j: q.push("a\u0000", 1)),
    "pull-queue-blank": Bad(Name, "queue", SQL, lambda q, j: q.pull(" ")),
    "dead-letters-queue-empty": Bad(Name, "queue", SQL, lambda q, j: q.dead_letters("")),
    # Namespaces.
    "namespace-empty": Bad(Name, "namespace", SQL, lambda q, j: as_namespace("")(q).push(Q, 1)),
    "namespace-blank": Bad(Name, "namespace", SQL, lambda q, j: as_namespace("   ")(q).push(Q, 1)),
    "namespace-129-chars": Bad(
        Name, "namespace", SQL, lambda q, j: as_namespace(LONG)(q).push(Q, 1)
    ),
    "namespace-none": Bad(Name, "namespace", PY, lambda q, j: as_namespace(None)(q).push(Q, 1)),
    "namespace-bytes": Bad(Name, "namespace", PY, lambda q, j: as_namespace(b"ns")(q).push(Q, 1)),
    "namespace-blank-pull": Bad(Name, "namespace", SQL, lambda q, j: as_namespace(" ")(q).pull(Q)),
    "namespace-blank-ack": Bad(Name, "namespace", SQL, lambda q, j: as_namespace(" ")(q).ack(j)),
    "namespace-blank-get-job": Bad(
        Name, "namespace", SQL, lambda q, j: as_namespace(" ")(q).get_job(j.id)
    ),
    "namespace-blank-tick": Bad(
        Name, "namespace", SQL, lambda q, j: as_namespace(" ")(q).tick_timeouts()
    ),
    # Worker ids.
    "worker-id-empty": Bad(Name, "worker_id", SQL, lambda q, j: q.pull(Q, worker_id="")),
    "worker-id-129-chars": Bad(Name, "worker_id", SQL, lambda q, j: q.pull(Q, worker_id=LONG)),
    "worker-id-int": Bad(Name, "worker_id", PY, lambda q, j: q.pull(Q, worker_id=7)),
    "worker-id-empty-ack": Bad(Name, "worker_id", SQL, lambda q, j: q.ack(j.id, worker_id="")),
    "worker-id-blank-release": Bad(
        Name, "worker_id", SQL, lambda q, j: q.release(j.id, worker_id=" ")
    ),
    "unique-key-blank": Bad(Name, "unique_key", SQL, lambda q, j: q.push(Q, 1, unique_key=" ")),
    # Durations.
    "visibility-timeout-zero": Bad(
        Duration, "visibility_timeout", SQL, lambda q, j: q.pull(Q, visibility_timeout=0)
    ),
    "visibility-timeout-negative": Bad(
        Duration, "visibility_timeout", SQL, lambda q, j: q.pull(Q, visibility_timeout=-1)
    ),
    "visibility-timeout-over-12h": Bad(
        Duration,
        "visibility_timeout",
        SQL,
        lambda q, j: q.pull(Q, visibility_timeout=timedelta(hours=12, seconds=1)),
    ),
    "visibility-timeout-str": Bad(
        Duration, "visibility_timeout", PY, lambda q, j: q.pull(Q, visibility_timeout="30")
    ),
    "visibility-timeout-bool": Bad(
        Duration, "visibility_timeout", PY, lambda q, j: q.pull(Q, visibility_timeout=True)
    ),
    "visibility-timeout-nan": Bad(
        Duration, "visibility_timeout", PY, lambda q, j: q.pull(Q, visibility_timeout=float("nan"))
    ),
    "extension-zero": Bad(
        Duration, "extension", SQL, lambda q, j: q.extend_visibility(j, extension=0)
    ),
    "extension-negative": Bad(
        Duration, "extension", SQL, lambda q, j: q.extend_visibility(j, extension=-5)
    ),
    "extension-over-12h": Bad(
        Duration, "extension", SQL, lambda q, j: q.extend_visibility(j, extension=43201)
    ),
    "extension-none": Bad(
        Duration, "extension", PY, lambda q, j: q.extend_visibility(j, extension=None)
    ),
    "delay-negative": Bad(Duration, "delay", SQL, lambda q, j: q.push(Q, 1, delay=-1)),
    "delay-str": Bad(Duration, "delay", PY, lambda q, j: q.push(Q, 1, delay="soon")),
    "backoff-negative": Bad(Duration, "backoff", SQL, lambda q, j: q.nack(j, backoff=-1)),
    "backoff-base-zero": Bad(
        Duration, "backoff_base", SQL, lambda q, j: q.push(Q, 1, backoff_base=0)
    ),
    "queue-visibility-timeout-zero": Bad(
        Duration, "visibility_timeout", SQL, lambda q, j: q.configure_queue(Q, visibility_timeout=0)
    ),
    # Attempts.
    "max-attempts-zero": Bad(
        Attempts, "max_attempts", SQL, lambda q, j: q.push(Q, 1, max_attempts=0)
    ),
    "max-attempts-negative": Bad(
        Attempts, "max_attempts", SQL, lambda q, j: q.push(Q, 1, max_attempts=-1)
    ),
    "max-attempts-1001": Bad(
        Attempts, "max_attempts", SQL, lambda q, j: q.push(Q, 1, max_attempts=1001)
    ),
    "max-attempts-str": Bad(
        Attempts, "max_attempts", PY, lambda q, j: q.push(Q, 1, max_attempts="3")
    ),
    "max-attempts-float": Bad(
        Attempts, "max_attempts", PY, lambda q, j: q.push(Q, 1, max_attempts=2.5)
    ),
    "queue-max-attempts-zero": Bad(
        Attempts, "max_attempts", SQL, lambda q, j: q.configure_queue(Q, max_attempts=0)
    ),
    # Priorities.
    "priority-40000": Bad(Priority, "priority", SQL, lambda q, j: q.push(Q, 1, priority=40000)),
    "priority-minus-40000": Bad(
        Priority, "priority", SQL, lambda q, j: q.push(Q, 1, priority=-40000)
    ),
    "priority-2-to-the-40": Bad(
        Priority, "priority", PY, lambda q, j: q.push(Q, 1, priority=2**40)
    ),
    "priority-str": Bad(Priority, "priority", PY, lambda q, j: q.push(Q, 1, priority="high")),
    "priority-none": Bad(Priority, "priority", PY, lambda q, j: q.push(Q, 1, priority=None)),
    "priority-bool": Bad(Priority, "priority", PY, lambda q, j: q.push(Q, 1, priority=True)),
    # Job ids and claim tokens.
    "job-id-str": Bad(JobId, "job", PY, lambda q, j: q.ack("1")),
    "job-id-none": Bad(JobId, "job", PY, lambda q, j: q.nack(None)),
    "job-id-float": Bad(JobId, "job", PY, lambda q, j: q.fail(1.5)),
    "job-id-bool": Bad(JobId, "job", PY, lambda q, j: q.extend_visibility(True, extension=10)),
    "job-id-2-to-the-64": Bad(JobId, "job", PY, lambda q, j: q.get_job(2**64)),
    "get-job-id-str": Bad(JobId, "job", PY, lambda q, j: q.get_job("1")),
    "claim-token-not-a-uuid": Bad(
        Token, "claim_token", PY, lambda q, j: q.ack(j.id, claim_token="not-a-uuid")
    ),
    "claim-token-not-a-uuid-fail": Bad(
        Token, "claim_token", PY, lambda q, j: q.fail(j.id, claim_token="1234")
    ),
    # Limits.
    "dead-letters-limit-zero": Bad(Limit, "limit", SQL, lambda q, j: q.dead_letters(limit=0)),
    "dead-letters-limit-too-big": Bad(
        Limit, "limit", SQL, lambda q, j: q.dead_letters(limit=10001)
    ),
    "tick-limit-zero": Bad(Limit, "limit", SQL, lambda q, j: q.tick_timeouts(limit=0)),
    "tick-limit-str": Bad(Limit, "limit", PY, lambda q, j: q.tick_timeouts(limit="10")),
}


@pytest.fixture
def observer(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """A connection of its own, autocommit: it sees only what was committed."""
    return connect(autocommit=True)


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
def test_bad_input_is_refused_with_a_readable_error_and_changes_nothing(
    queue: QueueClient,
    conn: psycopg.Connection,
    observer: psycopg.Connection,
    namespace: str,
    running_job: Job,
    case: Bad,
) -> None:
    before = snapshot(observer, namespace)

    with pytest.raises(case.error) as raised:
        case.call(queue, running_job)

    assert isinstance(raised.value, errors.PostkitError)
    assert case.word in str(raised.value)
    assert not str(raised.value).startswith("postkit:")
    if case.refused_by == PY:
        assert conn.info.transaction_status == TransactionStatus.IDLE  # no SQL was sent
    else:
        assert conn.info.transaction_status == TransactionStatus.INERROR
    conn.rollback()
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
    "newline-and-tab": "a\nb\tc",
    "pyformat-placeholder": "%(namespace)s",
    "format-placeholder": "%s",
    "braces": "{}",
    "escaped-nul-text": "\\u0000",
    "right-to-left-override": "\u202eevil\u202c",
    # Once refused as blank: E'\v' in SQL is the letter v, not a vertical tab.
    "letter-v": "v",
}


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


def test_a_payload_limit_out_of_range_is_refused(queue: QueueClient) -> None:
    with pytest.raises(errors.InvalidPayloadError, match="max_payload_bytes"):
        queue.configure_queue(Q, max_payload_bytes=0)


NAMES = [
    "a",
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
