"""The asyncio client and the synchronous client behave the same: every test here runs against
both, through one adapter that drives either client synchronously."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.errors import (
    InvalidDurationError,
    InvalidJobIdError,
    InvalidLimitError,
    InvalidNameError,
    InvalidPayloadError,
    InvalidPriorityError,
)
from postkit.queue import AsyncQueueClient, Job, NackOutcome, QueueClient

ROOT = Path(__file__).resolve().parents[2]
Q = "emails"


class Side:
    """One connection and a client on it, sync or async, driven synchronously.

    ``side.push(...)``, ``side.pull(...)``... call the client's method; for the asyncio client
    the coroutine runs to completion on the test's event loop.
    """

    def __init__(
        self,
        client: QueueClient | AsyncQueueClient,
        connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
        loop: asyncio.AbstractEventLoop | None,
    ) -> None:
        self.client = client
        self.connection = connection
        self._loop = loop

    def _await(self, value: Any) -> Any:
        if self._loop is None:
            return value
        return self._loop.run_until_complete(value)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.client, name)
        if not callable(attribute):
            return attribute
        return lambda *args, **kwargs: self._await(attribute(*args, **kwargs))

    def commit(self) -> None:
        self._await(self.connection.commit())

    def rollback(self) -> None:
        self._await(self.connection.rollback())

    def execute(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cursor = self.connection.cursor()
        self._await(cursor.execute(query, params))
        rows: list[tuple[Any, ...]] = self._await(cursor.fetchall())
        return rows

    def shift_clock(self, seconds: float) -> None:
        """Move this session's queue clock forward (see conftest.shift_clock)."""
        self.execute(
            "SELECT set_config('postkit_queue.clock_offset', %s, false)", (f"{seconds} seconds",)
        )

    def clock(self) -> datetime:
        now: datetime = self.execute("SELECT postkit_queue.clock()")[0][0]
        return now


OpenSide = Callable[..., Side]


@pytest.fixture(params=["sync", "async"])
def client_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


@pytest.fixture
def open_side(
    client_kind: str,
    dsn: str,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
) -> Iterator[OpenSide]:
    """Open a client of this test's kind on a connection of its own (one event loop per test
    for the async ones)."""
    loop = asyncio.new_event_loop() if client_kind == "async" else None
    async_connections: list[psycopg.AsyncConnection[Any]] = []

    def _open(*, autocommit: bool = False) -> Side:
        if loop is None:
            connection = connect(autocommit=autocommit)
            return Side(QueueClient(connection.cursor(), namespace=namespace), connection, None)
        async_connection = loop.run_until_complete(
            psycopg.AsyncConnection.connect(dsn, autocommit=autocommit)
        )
        async_connections.append(async_connection)
        client = AsyncQueueClient(async_connection.cursor(), namespace=namespace)
        return Side(client, async_connection, loop)

    yield _open
    if loop is not None:
        for async_connection in async_connections:
            loop.run_until_complete(async_connection.close())
        loop.close()


def claimed(side: Side, *, worker_id: str = "worker-1", visibility_timeout: float = 30) -> Job:
    """Push one job, claim it, commit both."""
    side.push(Q, {"to": "ada@example.com"})
    job: Job | None = side.pull(Q, worker_id=worker_id, visibility_timeout=visibility_timeout)
    assert job is not None
    side.commit()
    return job


def test_the_adapter_drives_the_client_of_each_kind(open_side: OpenSide, client_kind: str) -> None:
    expected = AsyncQueueClient if client_kind == "async" else QueueClient
    assert type(open_side().client) is expected


def test_push_pull_ack_round_trip(open_side: OpenSide) -> None:
    producer, worker = open_side(), open_side()
    job_id = producer.push(Q, {"to": "ada@example.com", "n": [1, 2]}, priority=3)
    producer.commit()

    job = worker.pull(Q, worker_id="worker-1", visibility_timeout=30)
    assert isinstance(job, Job)
    assert job.id == job_id
    assert job.payload == {"to": "ada@example.com", "n": [1, 2]}
    assert (job.attempts, job.state, job.worker_id, job.priority) == (1, "running", "worker-1", 3)
    assert job.claim_token is not None
    assert worker.pull(Q) is None, "a claimed job is not handed out twice"
    worker.commit()

    assert worker.ack(job) is True
    worker.commit()
    assert producer.get_job(job_id) is None, "an acked job leaves the queue"
    assert worker.ack(job) is False, "a second ack finds nothing to settle"


def test_a_rolled_back_push_never_happened(open_side: OpenSide) -> None:
    producer, worker = open_side(), open_side()
    producer.push(Q, {"n": 1})
    producer.rollback()
    assert worker.pull(Q) is None


def test_pull_batch_returns_up_to_limit_distinct_jobs(open_side: OpenSide) -> None:
    producer, worker = open_side(), open_side()
    pushed = {producer.push(Q, {"n": n}) for n in range(5)}
    producer.commit()

    first = worker.pull_batch(Q, limit=3, worker_id="worker-1")
    assert len(first) == 3
    assert len({job.id for job in first}) == 3
    rest = worker.pull_batch(Q, limit=10, worker_id="worker-1")
    assert len(rest) == 2
    assert {job.id for job in first} | {job.id for job in rest} == pushed
    assert worker.pull_batch(Q, limit=10) == []
    assert all(job.state == "running" and job.attempts == 1 for job in first + rest)


def test_nack_outcome_retried_then_dead_lettered(open_side: OpenSide) -> None:
    side = open_side()
    job_id = side.push(Q, {"n": 1}, max_attempts=2)
    side.commit()

    first = side.pull(Q, worker_id="worker-1")
    assert side.nack_outcome(first, error="smtp down", backoff=0) is NackOutcome.RETRIED
    side.commit()
    pending = side.get_job(job_id)
    assert (pending.state, pending.attempts) == ("pending", 1)
    assert [entry["error"] for entry in pending.errors] == ["smtp down"]

    second = side.pull(Q, worker_id="worker-1")
    assert second is not None and second.attempts == 2
    assert side.nack_outcome(second, error=ValueError("still down")) is NackOutcome.DEAD_LETTERED
    side.commit()

    [dead] = side.dead_letters(Q)
    assert (dead.job_id, dead.reason, dead.attempts) == (job_id, "attempts_exhausted", 2)
    assert dead.error == "ValueError: still down"
    assert [entry["error"] for entry in dead.errors] == ["smtp down", "ValueError: still down"]
    assert side.get_job(job_id).state == "dead"
    assert side.nack_outcome(second) is NackOutcome.STALE


def test_fail_moves_the_job_to_the_dead_letters(open_side: OpenSide) -> None:
    side = open_side()
    job = claimed(side)
    assert side.fail(job, error="bad address") is True
    side.commit()

    [dead] = side.dead_letters(Q)
    assert (dead.job_id, dead.reason, dead.error) == (job.id, "failed", "bad address")
    assert dead.payload == {"to": "ada@example.com"}
    assert side.fail(job) is False


def test_a_payload_python_cannot_decode_comes_back_marked_not_raised(open_side: OpenSide) -> None:
    side = open_side()
    [(job_id,)] = side.execute(
        "SELECT postkit_queue.push(%s, %s, %s::jsonb)", (side.namespace, Q, "[" * 3000 + "]" * 3000)
    )

    job = side.pull(Q)

    assert (job.id, job.payload) == (job_id, None)
    assert job.payload_error.startswith("payload could not be decoded: RecursionError: ")
    assert side.fail(job, error=job.payload_error) is True
    [dead] = side.dead_letters(Q)
    assert (dead.payload, dead.payload_error) == (None, job.payload_error)


def test_a_stale_claim_token_cannot_settle_the_new_claim(open_side: OpenSide) -> None:
    worker, ticker = open_side(), open_side()
    stale = claimed(worker, worker_id="worker-1", visibility_timeout=10)

    ticker.shift_clock(11)
    assert ticker.tick_timeouts() == 1
    # The same worker_id claims again: only the claim token tells the attempts apart.
    fresh = ticker.pull(Q, worker_id="worker-1")
    ticker.commit()
    assert fresh is not None and fresh.id == stale.id and fresh.attempts == 2
    assert fresh.claim_token != stale.claim_token

    assert worker.ack(stale) is False
    assert worker.nack_outcome(stale, error="late") is NackOutcome.STALE
    assert worker.fail(stale) is False
    assert worker.extend_visibility(stale, extension=60) is False
    assert worker.release(stale) is False
    worker.commit()
    assert ticker.ack(fresh) is True
    ticker.commit()


def test_release_returns_the_job_and_its_attempt_and_notifies(
    open_side: OpenSide, connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> None:
    side = open_side()
    job = claimed(side)
    assert job.attempts == 1

    listener = connect(autocommit=True)
    [(channel,)] = listener.execute(
        "SELECT postkit_queue.channel(%s, %s)", (namespace, Q)
    ).fetchall()
    listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
    listener.execute("SELECT postkit_queue.request_wakeup(%s, ARRAY[%s])", (namespace, Q))

    assert side.release(job) is True
    side.commit()
    notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [note.channel for note in notes] == [channel]

    released = side.get_job(job.id)
    assert released.state == "pending"
    assert released.attempts == 0, "the released claim's attempt is returned"
    assert released.claim_token is None and released.worker_id is None
    assert released.errors == (), "a release is not a failure"
    assert side.ack(job) is False, "the released claim no longer holds"
    again = side.pull(Q, worker_id="worker-2")
    assert again is not None and again.id == job.id and again.attempts == 1
    side.commit()


def test_extend_visibility_keeps_the_claim_past_its_deadline(open_side: OpenSide) -> None:
    worker, ticker = open_side(), open_side()
    job = claimed(worker, visibility_timeout=10)

    assert worker.extend_visibility(job, extension=600) is True
    worker.commit()
    extended = worker.get_job(job.id)
    remaining = (extended.visible_until - worker.clock()).total_seconds()
    assert 590 < remaining <= 600

    ticker.shift_clock(120)
    assert ticker.tick_timeouts() == 0, "the extended claim has not expired"
    ticker.commit()
    assert worker.ack(job) is True
    worker.commit()


def test_tick_timeouts_rescues_expired_claims(open_side: OpenSide) -> None:
    worker, ticker = open_side(), open_side()
    job = claimed(worker, visibility_timeout=10)

    assert ticker.tick_timeouts() == 0, "the claim has not expired yet"
    ticker.shift_clock(11)
    assert ticker.tick_timeouts() == 1
    ticker.commit()
    assert ticker.tick_timeouts() == 0, "each expired claim is rescued once"

    rescued = ticker.get_job(job.id)
    assert (rescued.state, rescued.attempts) == ("pending", 1)
    assert [entry["kind"] for entry in rescued.errors] == ["timeout"]


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda side: side.push("", {}), InvalidNameError),
        (lambda side: side.push(Q, object()), InvalidPayloadError),
        (lambda side: side.push(Q, {}, priority=2**40), InvalidPriorityError),
        (lambda side: side.push(Q, {}, delay=-1), InvalidDurationError),
        (lambda side: side.pull(Q, visibility_timeout="soon"), InvalidDurationError),
        (lambda side: side.pull_batch(Q, limit=0), InvalidLimitError),
        (lambda side: side.ack("17"), InvalidJobIdError),
        (lambda side: side.pull(None), InvalidNameError),
    ],
    ids=[
        "empty-queue",
        "unserializable-payload",
        "priority",
        "negative-delay",
        "duration-type",
        "limit",
        "job-id",
        "none-queue",
    ],
)
def test_both_clients_raise_the_same_validation_errors(
    open_side: OpenSide, call: Callable[[Side], Any], error: type[Exception]
) -> None:
    side = open_side()
    with pytest.raises(error) as raised:
        call(side)
    assert type(raised.value) is error
    side.rollback()
    assert side.pull(Q) is None, "nothing was written"


def test_the_generated_sync_modules_are_in_step() -> None:
    result = subprocess.run(
        [sys.executable, "tools/async_to_sync.py", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
