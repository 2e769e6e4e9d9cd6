"""Job results: kept by the ack of a job whose queue keeps results, read back by ``result``,
waited for on the namespace's results channel by ``wait_for_result``, pruned with the queue's
retention. Against a real server, sync and async; the waits are proven to end on the
notification (the waiter's backend is seen idle in its LISTEN before the settle is sent, and
its timeout is far longer than the test waits)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import (
    AsyncQueueClient,
    AsyncResultListener,
    JobResult,
    QueueClient,
    ResultListener,
    limits,
    listen,
    listen_async,
    protocol,
)
from tests.signals import query_start, wait_until_idle_after

Q = "reports"
PLAIN = "plain"  # a queue that keeps no results
Shift = Callable[[QueueClient, float], None]


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client whose queue Q keeps results for an hour."""
    queue = QueueClient(connect(autocommit=True).cursor(), namespace=namespace)
    queue.configure_queue(Q, retain_results=3600)
    return queue


@pytest.fixture
def settler(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """A worker's client on a connection of its own (autocommit)."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def observer(connect: Callable[..., psycopg.Connection[Any]]) -> psycopg.Connection[Any]:
    """An autocommit connection that watches pg_stat_activity."""
    return connect(autocommit=True)


@pytest.fixture(autouse=True)
def reads_only_when_notified(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits here read a result again only when a notification names it (or the timeout
    ends), so that a wait that returns before its timeout shows the notification came; the
    fallback read of every RESULT_POLL_INTERVAL seconds has a test of its own."""
    for module in (listen, listen_async):
        monkeypatch.setattr(module, "RESULT_POLL_INTERVAL", 600.0)


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


def pushed(client: QueueClient, queue: str = Q, payload: Any = None) -> int:
    job_id = client.push(queue, payload if payload is not None else {})
    assert job_id is not None
    return job_id


def finished(client: QueueClient, queue: str = Q, result: Any = None) -> int:
    """A job of ``queue`` pushed, claimed and acked with ``result``."""
    job_id = pushed(client, queue)
    job = client.pull(queue)
    assert job is not None and job.id == job_id
    assert client.ack(job, result=result)
    return job_id


# ---------------------------------------------------------------------------------------------
# Keeping and reading.
# ---------------------------------------------------------------------------------------------


def test_a_kept_result_is_read_back_with_when_it_completed_and_when_it_expires(
    client: QueueClient,
) -> None:
    job_id = finished(client, result={"total": 3, "rows": [1, 2], "label": "é\n"})

    result = client.result(job_id)

    assert (result.state, result.queue, result.value, result.attempts) == (
        "completed",
        Q,
        {"total": 3, "rows": [1, 2], "label": "é\n"},
        1,
    )
    assert result.finished and result.error is None and result.value_error is None
    assert result.finished_at is not None and result.expires_at is not None
    assert result.expires_at - result.finished_at == timedelta(hours=1)


def test_a_completed_job_without_a_value_reads_as_completed_with_none(
    client: QueueClient,
) -> None:
    job_id = finished(client, result=None)

    result = client.result(job_id)

    assert (result.state, result.value, result.finished) == ("completed", None, True)


def test_a_queue_that_keeps_no_results_keeps_none(client: QueueClient) -> None:
    job_id = finished(client, PLAIN, result={"total": 3})

    assert client.result(job_id) == JobResult(job_id=job_id, state="unknown")


def test_a_queue_that_archives_completed_jobs_reads_them_as_completed_without_a_value(
    client: QueueClient,
) -> None:
    client.configure_queue(PLAIN, retain_completed=3600)
    job_id = finished(client, PLAIN, result={"total": 3})

    result = client.result(job_id)

    assert (result.state, result.value, result.attempts) == ("completed", None, 1)


def test_results_are_kept_from_the_moment_the_queue_keeps_them(client: QueueClient) -> None:
    before = finished(client, PLAIN, result=1)
    client.configure_queue(PLAIN, retain_results=60)
    after = finished(client, PLAIN, result=2)
    client.configure_queue(PLAIN, retain_results=None)
    stopped = finished(client, PLAIN, result=3)

    assert [client.result(job_id).state for job_id in (before, after, stopped)] == [
        "unknown",
        "completed",
        "unknown",
    ]
    assert client.result(after).value == 2
    assert client.queue_policy(PLAIN).retain_results is None


def test_a_live_job_reads_as_not_finished_in_its_state(client: QueueClient) -> None:
    pending = pushed(client)
    scheduled = client.push(Q, {}, delay=600)
    assert scheduled is not None
    running = client.pull(Q)
    assert running is not None and running.id == pending
    waiting = pushed(client)

    states = [client.result(job_id) for job_id in (pending, scheduled, waiting)]

    assert [(r.state, r.finished, r.queue) for r in states] == [
        ("running", False, Q),
        ("scheduled", False, Q),
        ("pending", False, Q),
    ]
    assert states[0].attempts == 1 and states[0].value is None


def test_a_dead_letter_reads_as_dead_with_its_error_and_a_redrive_says_where_it_went(
    client: QueueClient,
) -> None:
    job_id = pushed(client)
    job = client.pull(Q)
    assert job is not None
    assert client.fail(job, error="card declined")

    dead = client.result(job_id)
    [redriven] = client.redrive([job_id])

    assert (dead.state, dead.error, dead.reason, dead.attempts, dead.finished) == (
        "dead",
        "card declined",
        "failed",
        1,
        True,
    )
    assert dead.finished_at is not None and dead.expires_at is not None
    assert client.result(job_id).redriven_job_id == redriven.new_job_id


def test_a_job_never_pushed_here_is_unknown(client: QueueClient, namespace: str) -> None:
    job_id = finished(client, result="mine")
    elsewhere = QueueClient(client.cursor, namespace=f"{namespace}-other")

    assert elsewhere.result(job_id) == JobResult(job_id=job_id, state="unknown")
    assert client.result(job_id + 1000).state == "unknown"


def test_a_stale_ack_keeps_no_result(
    client: QueueClient, settler: QueueClient, shift_clock: Shift
) -> None:
    job_id = pushed(client)
    first = settler.pull(Q, visibility_timeout=1)
    assert first is not None
    shift_clock(client, 5)
    assert client.tick_timeouts() == 1
    second = client.pull(Q)
    assert second is not None and second.id == job_id

    assert settler.ack(first, result="from the stale claim") is False
    assert client.result(job_id).state == "running"
    assert client.ack(second, result="from the claim in force")
    assert client.result(job_id).value == "from the claim in force"


def test_ack_many_keeps_each_jobs_own_result_and_none_of_a_stale_one(
    client: QueueClient, settler: QueueClient
) -> None:
    ids = [pushed(client) for _ in range(3)]
    jobs = sorted(settler.pull_batch(Q, limit=3), key=lambda job: job.id)
    assert [job.id for job in jobs] == ids
    assert settler.release(jobs[2])  # its claim ends: the Job in hand is stale

    acked = settler.ack_many(jobs, results=[{"n": 1}, None, {"n": 3}])

    assert sorted(acked) == ids[:2]
    assert [client.result(job_id).value for job_id in ids[:2]] == [{"n": 1}, None]
    assert client.result(ids[2]).state == "pending"


def test_ack_and_pull_keeps_the_results_it_acknowledges(client: QueueClient) -> None:
    first = pushed(client)
    job = client.pull(Q)
    assert job is not None
    second = pushed(client)

    acked, claimed = client.ack_and_pull(Q, [job], limit=1, results=[[1, 2, 3]])

    assert acked == [first] and [j.id for j in claimed] == [second]
    assert client.result(first).value == [1, 2, 3]


# ---------------------------------------------------------------------------------------------
# Refusals.
# ---------------------------------------------------------------------------------------------


def big_result(size: int) -> str:
    """A string result of ``size`` bytes as JSON text (its quotes included)."""
    return "x" * (size - 2)


def test_a_result_at_the_limit_is_kept_whole(client: QueueClient) -> None:
    job_id = finished(client, result=big_result(limits.RESULT_BYTES))

    assert client.result(job_id).value == big_result(limits.RESULT_BYTES)


def test_an_oversized_result_is_refused_before_anything_is_sent(
    connect: Callable[..., psycopg.Connection[Any]], namespace: str
) -> None:
    connection = connect()
    queue = QueueClient(connection.cursor(), namespace=namespace)
    job_id = pushed(queue)
    job = queue.pull(Q)
    assert job is not None

    with pytest.raises(errors.InvalidResultError, match="1048577 bytes as JSON text"):
        queue.ack(job, result=big_result(limits.RESULT_BYTES + 1))
    with pytest.raises(errors.InvalidResultError, match="not JSON-serializable"):
        queue.ack(job, result={1, 2})
    with pytest.raises(errors.InvalidResultError, match="1 results for 2 jobs"):
        queue.ack_many([job, job], results=[1])

    # The transaction is intact: the ack goes through with a result that fits.
    assert queue.ack(job, result=big_result(limits.RESULT_BYTES))
    connection.commit()
    assert queue.get_job(job_id) is None


def test_the_sql_module_refuses_an_oversized_result_and_a_misshapen_batch(
    conn: psycopg.Connection[Any], namespace: str
) -> None:
    too_big = json.dumps(big_result(limits.RESULT_BYTES + 1))
    statements = {
        "ack": "SELECT postkit_queue.ack(%s, 1, 'w', NULL, %s::jsonb)",
        "ack_many": "SELECT postkit_queue.ack_many(%s, '{1}', %s::uuid[], %s::jsonb)",
    }
    token = "{00000000-0000-0000-0000-000000000000}"
    refusals = []
    for args in [
        (statements["ack"], (namespace, too_big)),
        (statements["ack_many"], (namespace, token, f"[{too_big}]")),
        (statements["ack_many"], (namespace, token, "[1, 2]")),
        (statements["ack_many"], (namespace, token, '{"1": 1}')),
    ]:
        with pytest.raises(psycopg.Error) as raised:
            conn.execute(*args)
        conn.rollback()
        refusals.append((raised.value.sqlstate, raised.value.diag.message_primary))

    assert [sqlstate for sqlstate, _ in refusals] == ["PKQ16"] * 4
    assert "results[1] is 1048577 bytes" in str(refusals[1][1])
    assert "array of 2 for 1 job ids" in str(refusals[2][1])


VALUES: list[Any] = [
    True,
    0,
    -12,
    10**40,
    0.1,
    -0.0,
    1.0,
    1e-07,
    1.5e-07,
    1e16,
    2.5e20,
    1.2345678901234568e17,
    -1e300,
    "",
    'é\n\t"\\\x01\x1f/\u2028',
    "1e5 inside a string",
    [],
    {},
    [1, [2, [3, {}]], {"a": None}],
    {"b": 1, "a": [1.5e-9, "x"], "": {"nested": -0.0}},
    {3: "int key", 2.5: "float key", True: "bool key", None: "null key"},
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v)[:30] for v in VALUES])
def test_the_sdk_measures_a_result_as_postgresql_writes_it(
    conn: psycopg.Connection[Any], value: Any
) -> None:
    checked = protocol.checked_result(value)
    assert checked is not None
    [(measured,)] = conn.execute("SELECT octet_length(%s::jsonb::text)", (checked.text,)).fetchall()

    assert limits.result_bytes(value, checked.text) == measured


def test_a_result_keeps_the_type_of_each_number(client: QueueClient, settler: QueueClient) -> None:
    value = {"floats": [2.0**53, 1e16, 2.5e16, 1e300, 0.5], "ints": [2**53 + 1, 10**16]}
    job_id = client.push(Q, {})
    job = settler.pull(Q)
    assert job is not None and job.id == job_id
    assert settler.ack(job, result=value)

    kept = client.result(job_id).value

    assert kept == value
    assert [type(number) for number in kept["floats"]] == [float] * 5
    assert [type(number) for number in kept["ints"]] == [int] * 2


# ---------------------------------------------------------------------------------------------
# Waiting.
# ---------------------------------------------------------------------------------------------


class Waiter:
    """A wait for a result on a thread of its own: with a ResultListener, an
    AsyncResultListener, or a client on an autocommit connection, sync or async."""

    def __init__(self, kind: str, dsn: str, namespace: str) -> None:
        self.kind = kind
        self._loop = asyncio.new_event_loop() if kind.startswith("async") else None
        self._connection: Any
        if self._loop is None:
            self._connection = psycopg.connect(dsn, autocommit=True)
            self._connection.execute("SELECT 1")  # a query_start to wait after
        else:
            self._connection = self._loop.run_until_complete(
                psycopg.AsyncConnection.connect(dsn, autocommit=True)
            )
            self._loop.run_until_complete(self._connection.execute("SELECT 1"))
        self.backend_pid: int = self._connection.info.backend_pid
        self._namespace = namespace

    def wait(self, job_id: int, timeout: float) -> JobResult:
        if self.kind == "listener":
            return ResultListener(self._connection, self._namespace).wait_for_result(
                job_id, timeout=timeout
            )
        if self.kind == "client":
            client = QueueClient(self._connection.cursor(), namespace=self._namespace)
            return client.wait_for_result(job_id, timeout=timeout)
        assert self._loop is not None
        if self.kind == "async-listener":
            listener = AsyncResultListener(self._connection, self._namespace)
            return self._loop.run_until_complete(listener.wait_for_result(job_id, timeout=timeout))
        async_client = AsyncQueueClient(self._connection.cursor(), namespace=self._namespace)
        return self._loop.run_until_complete(async_client.wait_for_result(job_id, timeout=timeout))

    def close(self) -> None:
        if self._loop is None:
            self._connection.close()
            return
        self._loop.run_until_complete(self._connection.close())
        self._loop.close()


@pytest.fixture(params=["listener", "client", "async-listener", "async-client"])
def waiter(request: pytest.FixtureRequest, dsn: str, namespace: str) -> Iterator[Waiter]:
    waiting = Waiter(request.param, dsn, namespace)
    yield waiting
    waiting.close()


def wait_in_background(
    pool: ThreadPoolExecutor,
    waiter: Waiter,
    observer: psycopg.Connection[Any],
    job_id: int,
    timeout: float,
) -> Future[JobResult]:
    """Start the wait, and return once the waiter has read the job's result after it LISTENed
    and sits idle: from then on only a notification (or its timeout) can end its wait."""
    before = query_start(observer, waiter.backend_pid)
    waiting = pool.submit(waiter.wait, job_id, timeout)
    wait_until_idle_after(observer, waiter.backend_pid, "job_result", before)
    assert not waiting.done(), f"the wait ended before the job settled: {waiting.result()}"
    return waiting


def test_wait_for_result_is_woken_by_the_ack_of_the_job(
    waiter: Waiter,
    client: QueueClient,
    settler: QueueClient,
    observer: psycopg.Connection[Any],
    pool: ThreadPoolExecutor,
) -> None:
    job_id = pushed(client)
    started = time.monotonic()
    waiting = wait_in_background(pool, waiter, observer, job_id, timeout=60)

    job = settler.pull(Q)
    assert job is not None
    assert settler.ack(job, result={"total": 42})
    result = waiting.result(timeout=15)

    assert (result.state, result.value) == ("completed", {"total": 42})
    assert time.monotonic() - started < 60, "woken by the notification, not the timeout"


def test_wait_for_result_is_woken_by_the_dead_lettering_of_the_job(
    waiter: Waiter,
    client: QueueClient,
    settler: QueueClient,
    observer: psycopg.Connection[Any],
    pool: ThreadPoolExecutor,
) -> None:
    job_id = client.push(Q, {}, max_attempts=1)
    assert job_id is not None
    waiting = wait_in_background(pool, waiter, observer, job_id, timeout=60)

    job = settler.pull(Q)
    assert job is not None
    assert settler.nack(job, error="out of attempts")
    result = waiting.result(timeout=15)

    assert (result.state, result.error, result.reason) == (
        "dead",
        "out of attempts",
        "attempts_exhausted",
    )


def test_wait_for_result_finds_a_job_that_finished_before_the_wait(
    waiter: Waiter, client: QueueClient
) -> None:
    job_id = finished(client, result=[1])

    assert waiter.wait(job_id, timeout=0).value == [1]
    assert waiter.wait(job_id + 1000, timeout=0).state == "unknown"


def test_wait_for_result_raises_a_timeout_with_the_unfinished_result(
    waiter: Waiter, client: QueueClient
) -> None:
    job_id = pushed(client)

    started = time.monotonic()
    with pytest.raises(errors.ResultTimeoutError) as raised:
        waiter.wait(job_id, timeout=0.3)

    assert time.monotonic() - started >= 0.3
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value.result, JobResult)
    assert raised.value.result.state == "pending"
    assert str(job_id) in str(raised.value) and "pending" in str(raised.value)


def test_a_wait_that_timed_out_reads_the_job_once_more_at_its_end(
    client: QueueClient, dsn: str, namespace: str
) -> None:
    """A settle that sends no notification (a session with postkit_queue.notify off) is still
    found, by the read at the end of the timeout."""
    job_id = pushed(client)
    job = client.pull(Q)
    assert job is not None
    client.cursor.execute("SET postkit_queue.notify = off")
    assert client.ack(job, result="quietly")

    with psycopg.connect(dsn, autocommit=True) as connection:
        listener = ResultListener(connection, namespace)
        assert listener.wait_for_result(job_id, timeout=0.2).value == "quietly"


def test_a_settle_that_sent_no_notification_is_found_by_the_next_read_before_the_timeout(
    waiter: Waiter,
    client: QueueClient,
    settler: QueueClient,
    observer: psycopg.Connection[Any],
    pool: ThreadPoolExecutor,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a settle delegated to a Citus worker node does (docs/scaling.md): the wait reads the
    result again every RESULT_POLL_INTERVAL seconds."""
    for module in (listen, listen_async):
        monkeypatch.setattr(module, "RESULT_POLL_INTERVAL", 0.2)
    job_id = pushed(client)
    waiting = wait_in_background(pool, waiter, observer, job_id, timeout=60)

    job = settler.pull(Q)
    assert job is not None
    settler.cursor.execute("SET postkit_queue.notify = off")
    assert settler.ack(job, result="quietly")
    # Without the reads between notifications the wait would last its 60 s, past these 15.
    result = waiting.result(timeout=15)

    assert (result.state, result.value) == ("completed", "quietly")


def test_wait_for_result_refuses_a_connection_that_is_not_in_autocommit_mode(
    conn: psycopg.Connection[Any], namespace: str
) -> None:
    queue = QueueClient(conn.cursor(), namespace=namespace)

    with pytest.raises(errors.ListenUnavailableError, match="autocommit"):
        queue.wait_for_result(1, timeout=1)
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_the_clients_wait_stops_listening_when_it_ends(
    connect: Callable[..., psycopg.Connection[Any]], client: QueueClient, namespace: str
) -> None:
    connection = connect(autocommit=True)
    queue = QueueClient(connection.cursor(), namespace=namespace)
    job_id = finished(client, result=1)

    queue.wait_for_result(job_id, timeout=1)

    [(channels,)] = connection.execute("SELECT count(*) FROM pg_listening_channels()").fetchall()
    assert channels == 0


def test_wait_for_result_checks_its_arguments(waiter: Waiter) -> None:
    with pytest.raises(errors.InvalidDurationError):
        waiter.wait(1, timeout=-1)
    with pytest.raises(errors.InvalidJobIdError):
        waiter.wait("1", timeout=1)  # type: ignore[arg-type]


def test_one_listener_serves_many_waits_one_after_the_other(
    client: QueueClient, settler: QueueClient, dsn: str, namespace: str
) -> None:
    ids = [pushed(client) for _ in range(3)]

    def settle() -> None:
        for job in sorted(settler.pull_batch(Q, limit=3), key=lambda j: j.id):
            assert settler.ack(job, result=job.id)

    with ResultListener.connect(dsn, namespace) as listener:
        thread = threading.Thread(target=settle)
        thread.start()
        values = [listener.wait_for_result(job_id, timeout=30).value for job_id in ids]
        thread.join(timeout=15)

    assert values == ids


# ---------------------------------------------------------------------------------------------
# Retention.
# ---------------------------------------------------------------------------------------------


def test_prune_deletes_expired_results_in_bounded_batches(
    client: QueueClient, shift_clock: Shift
) -> None:
    client.configure_queue(Q, retain_results=60)
    ids = [finished(client, result=n) for n in range(3)]
    client.configure_queue(Q, retain_results=3600)
    kept = finished(client, result="kept")

    assert client.prune().results == 0
    shift_clock(client, 120)
    assert client.prune(limit=2).results == 2
    assert client.prune(limit=2).results == 1

    assert [client.result(job_id).state for job_id in ids] == ["unknown"] * 3
    assert client.result(kept).value == "kept"


def test_a_result_python_cannot_decode_reads_with_why(client: QueueClient) -> None:
    """Another client may keep a result nested deeper than Python's recursion limit: reading
    it never raises."""
    job_id = pushed(client)
    job = client.pull(Q)
    assert job is not None
    deep = "[" * 3000 + "]" * 3000
    client.cursor.execute(
        "SELECT postkit_queue.ack(%s, %s, NULL, %s::uuid, %s::jsonb)",
        (client.namespace, job_id, job.claim_token, deep),
    )

    result = client.result(job_id)

    assert (result.state, result.value) == ("completed", None)
    assert result.value_error is not None and "result could not be decoded" in result.value_error
