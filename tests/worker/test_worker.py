"""The worker runtime against a real server: in-process (``Worker.run`` on a thread, stopped
with ``stop()``) and as real processes receiving real signals.

Nothing here sleeps and hopes: tests wait on events, barriers, a subprocess's output lines, or
poll the database with a bounded deadline and a message that says what never happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue as stdlib_queue
import signal
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

from postkit.errors import InvalidDurationError, PermanentError, RetryLater
from postkit.queue import Job, QueueClient, ResultListener, limits
from postkit.worker import Handlers, Worker, error_summary
from tests.processes import WorkerProcess
from tests.signals import wait_for, wait_until
from tests.threads import QUIET, worker_threads

Q = "work"
Shift = Callable[[QueueClient, float], None]
StartWorker = Callable[..., Worker]
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Helpers and fixtures.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def worker_dsn(dsn: str, namespace: str) -> str:
    """The server under test, under an application_name that marks this test's workers."""
    return psycopg.conninfo.make_conninfo(dsn, application_name=f"pk-{namespace}")


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client: each push commits at once; reads see the latest state."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def start_worker(worker_dsn: str, namespace: str) -> Iterator[StartWorker]:
    """Start workers on threads; each is stopped and must have shut down after the test.

    By default the fallback poll and the tick are far longer than any test waits, so a test
    that sees a job run promptly saw the worker woken by a notification.
    """
    with worker_threads() as run:
        yield lambda handlers, **options: run(
            Worker(worker_dsn, handlers, namespace=namespace, **{**QUIET, **options})
        )


def next_item(items: stdlib_queue.SimpleQueue[T], message: str, timeout: float = 15.0) -> T:
    """The next item a handler put in ``items``; fail with ``message`` if none comes."""
    try:
        return items.get(timeout=timeout)
    except stdlib_queue.Empty:
        pytest.fail(f"{message} (waited {timeout:.0f}s)")


def gone(client: QueueClient, job_id: int) -> Callable[[], bool]:
    return lambda: client.get_job(job_id) is None


def db_seconds_until(client: QueueClient, job: Job) -> float:
    client.cursor.execute("SELECT postkit_queue.clock()")
    now = client.cursor.fetchone()[0]
    assert job.run_at is not None
    return float((job.run_at - now).total_seconds())


def pushed(client: QueueClient, payload: Any = None, queue: str = Q, **kwargs: Any) -> int:
    job_id = client.push(queue, payload if payload is not None else {}, **kwargs)
    assert job_id is not None
    return job_id


# ---------------------------------------------------------------------------------------------
# Registration and construction.
# ---------------------------------------------------------------------------------------------


def test_handlers_reject_a_second_handler_and_async_transactional_ones() -> None:
    handlers = Handlers()
    handlers.add(Q, lambda job: None)
    with pytest.raises(ValueError, match="already has a handler"):
        handlers.add(Q, lambda job: None)

    async def handler(job: Job) -> None:
        pass

    with pytest.raises(ValueError, match="synchronous"):
        handlers.add("other", handler, transactional=True)
    assert list(handlers) == [Q] and len(handlers) == 1


def test_handlers_give_a_transaction_of_its_own_only_to_a_transactional_handler() -> None:
    handlers = Handlers()
    with pytest.raises(ValueError, match="only a transactional handler"):
        handlers.add(Q, lambda job: None, transaction=contextlib.nullcontext)
    handlers.add(
        Q, lambda job, cursor: None, transactional=True, transaction=contextlib.nullcontext
    )
    assert not handlers[Q].holds_pool_connection


def test_a_worker_needs_a_handler_for_each_queue(dsn: str) -> None:
    with pytest.raises(ValueError, match="no handler"):
        Worker(dsn, {Q: lambda job: None}, queues=[Q, "unknown"])
    with pytest.raises(ValueError, match="no handler"):
        Worker(dsn, {})
    with pytest.raises(ValueError, match="positive"):
        Worker(dsn, {Q: lambda job: None}, concurrency=0)


def test_a_worker_refuses_one_queue_given_as_a_str_rather_than_serving_its_letters(
    dsn: str,
) -> None:
    with pytest.raises(ValueError, match=r"got the str 'q' \(one queue: \['q'\]\)"):
        Worker(dsn, {"q": lambda job: None}, queues="q")


def test_error_summary_has_the_error_and_the_last_frames() -> None:
    def inner() -> None:
        raise KeyError("missing")

    try:
        inner()
    except KeyError as error:
        summary = error_summary(error)
    assert summary.startswith("KeyError: 'missing'\n")
    assert "in inner" in summary


# ---------------------------------------------------------------------------------------------
# Outcomes.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("registration", ["decorator", "add", "dict"])
def test_a_returning_handler_acks_its_job(
    start_worker: StartWorker, client: QueueClient, registration: str
) -> None:
    seen: list[tuple[int, Any, int]] = []

    def handle(job: Job) -> None:
        seen.append((job.id, job.payload, job.attempts))

    handlers: Handlers | dict[str, Callable[..., Any]]
    if registration == "decorator":
        handlers = Handlers()
        assert handlers.register(Q)(handle) is handle
    elif registration == "add":
        handlers = Handlers()
        handlers.add(Q, handle)
    else:
        handlers = {Q: handle}
    worker = start_worker(handlers)

    job_id = pushed(client, {"user": 42})
    wait_until(gone(client, job_id), "the job to be acked")
    assert seen == [(job_id, {"user": 42}, 1)]
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 1, "the worker to count what it settled")
    assert client.dead_letters() == []


def test_an_exception_nacks_with_the_error_and_a_traceback_summary(
    start_worker: StartWorker, client: QueueClient
) -> None:
    def explode(job: Job) -> None:
        raise ValueError("boom")

    worker = start_worker({Q: explode})
    job_id = pushed(client, max_attempts=5, backoff_base=60)

    job = wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.errors and found,
        "the failing job to be nacked",
    )
    assert job.state == "pending" and job.attempts == 1
    [entry] = job.errors
    assert entry["kind"] == "nack"
    assert entry["attempt"] == 1
    assert entry["error"].startswith("ValueError: boom\n")
    assert "in explode" in entry["error"], "the traceback summary names the handler's frame"
    assert 'raise ValueError("boom")' in entry["error"]
    assert db_seconds_until(client, job) > 50, "the retry waits the job's backoff"
    wait_until(lambda: worker.stats.retried == 1, "the worker to count the retry")


def test_an_exception_whose_message_postgresql_cannot_store_still_nacks_the_job(
    start_worker: StartWorker, client: QueueClient
) -> None:
    """A file name decoded with surrogateescape puts a lone surrogate in the message, which no
    text column holds, as a NUL cannot be held: each is stored as U+FFFD."""
    name = b"report-\xff.csv".decode("utf-8", "surrogateescape")

    def explode(job: Job) -> None:
        raise OSError(f"cannot open {name}\x00")

    worker = start_worker({Q: explode})
    job_id = pushed(client, max_attempts=5, backoff_base=60)

    job = wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.errors and found,
        "the failing job to be nacked",
    )
    [entry] = job.errors
    assert entry["error"].startswith("OSError: cannot open report-\ufffd.csv\ufffd\n")
    wait_until(lambda: worker.stats.retried == 1, "the worker to count the retry")


def test_permanent_error_dead_letters_at_once(
    start_worker: StartWorker, client: QueueClient
) -> None:
    def reject(job: Job) -> None:
        raise PermanentError("invalid address")

    worker = start_worker({Q: reject})
    job_id = pushed(client, {"to": "nobody"}, max_attempts=20)

    [dead] = wait_until(client.dead_letters, "the job to be dead-lettered")
    assert (dead.job_id, dead.reason, dead.attempts) == (job_id, "failed", 1)
    assert dead.error is not None and dead.error.startswith("PermanentError: invalid address\n")
    assert "in reject" in dead.error
    assert dead.payload == {"to": "nobody"}
    wait_until(lambda: worker.stats.dead_lettered == 1, "the worker to count it")


@pytest.mark.parametrize("delay", [120, timedelta(minutes=2)], ids=["seconds", "timedelta"])
def test_retry_later_retries_after_the_delay_it_names(
    start_worker: StartWorker, client: QueueClient, delay: float | timedelta
) -> None:
    def later(job: Job) -> None:
        raise RetryLater("rate limited", delay=delay)

    start_worker({Q: later})
    job_id = pushed(client, backoff_base=1, backoff_cap=2)

    job = wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.errors and found,
        "the job to be retried",
    )
    assert job.state == "pending" and job.attempts == 1
    assert job.errors[0]["error"].startswith("RetryLater: rate limited\n")
    remaining = db_seconds_until(client, job)
    assert 100 < remaining <= 120, f"run_at is {remaining:.1f}s away, not about 120s"


def test_a_job_that_cannot_be_settled_does_not_cost_the_worker_a_handler_thread(
    start_worker: StartWorker, client: QueueClient
) -> None:
    """Regression: a settle that raised (here the database rejects a negative retry delay,
    smuggled past RetryLater's own check) killed the handler thread; with concurrency=1 the
    worker then claimed jobs it never ran."""
    ran: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()

    def handle(job: Job) -> None:
        if job.payload["bad"]:
            retry = RetryLater("a delay the database rejects", delay=1)
            retry.delay = -1
            raise retry
        ran.put(job.id)

    bad = pushed(client, {"bad": True}, priority=10)
    good = pushed(client, {"bad": False})
    start_worker({Q: handle}, concurrency=1)

    assert next_item(ran, "the good job never ran") == good
    wait_until(gone(client, good), "the good job to be acked")
    stuck = client.get_job(bad)
    assert stuck is not None and stuck.state == "running", "left to expire and be redelivered"


# Valid JSON to PostgreSQL that Python's json module refuses: nested past the recursion limit,
# and an integer past sys.get_int_max_str_digits().
UNDECODABLE = {"nested-3000-deep": "[" * 3000 + "]" * 3000, "5000-digit-number": "1" * 5000}


def pushed_from_sql(client: QueueClient, payload_text: str, queue: str = Q) -> int:
    """Push a payload as JSON text through the SQL API, as a producer in another language."""
    client.cursor.execute(
        "SELECT postkit_queue.push(%s, %s, %s::jsonb)", (client.namespace, queue, payload_text)
    )
    job_id: int = client.cursor.fetchone()[0]
    return job_id


def dead_letter_of(client: QueueClient, job_id: int) -> Job:
    return wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.state == "dead" and found,
        f"job {job_id}, whose payload Python cannot decode, to be dead-lettered",
    )


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_job_whose_payload_cannot_be_decoded_is_dead_lettered_and_its_batch_runs(
    start_worker: StartWorker, client: QueueClient, kind: str
) -> None:
    ran: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    handlers = Handlers()
    if kind == "sync":
        handlers.add(Q, lambda job: ran.put(job.payload["n"]))
    else:

        async def handle(job: Job) -> None:
            ran.put(job.payload["n"])

        handlers.add(Q, handle)
    good = [pushed(client, {"n": n}) for n in range(2)]
    bad = {name: pushed_from_sql(client, text) for name, text in UNDECODABLE.items()}
    good += [pushed(client, {"n": n}) for n in range(2, 4)]
    # One claim takes all six: the bad ones arrive in the same batch as the good ones.
    worker = start_worker(handlers, concurrency=8)

    assert sorted(next_item(ran, "a good job never ran") for _ in good) == [0, 1, 2, 3]
    for job_id in good:
        wait_until(gone(client, job_id), f"good job {job_id} to be acked")
    for name, job_id in bad.items():
        dead = dead_letter_of(client, job_id)
        [entry] = dead.errors
        assert (entry["kind"], dead.attempts) == ("fail", 1), "dead at once, without retries"
        expected = "RecursionError" if name.startswith("nested") else "ValueError"
        assert entry["error"].startswith(f"payload could not be decoded: {expected}: ")
        assert dead.payload is None and dead.payload_error == entry["error"]
    wait_until(lambda: worker.stats.dead_lettered == 2, "the worker to count both")

    # The worker is still working: the next push (claimed on the listener's wake-up) runs.
    later_bad = pushed_from_sql(client, UNDECODABLE["nested-3000-deep"])
    later_good = pushed(client, {"n": 4})
    assert next_item(ran, "the worker stopped working after the bad jobs") == 4
    dead_letter_of(client, later_bad)
    wait_until(gone(client, later_good), "the later good job to be acked")


def test_a_schedule_that_cannot_be_computed_does_not_stop_the_worker(
    start_worker: StartWorker, client: QueueClient
) -> None:
    ran: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    for name in ("bad", "good"):
        client.create_schedule(name, Q, {"from": name}, every=3600)
    # Saved before the SQL module checked cron expressions, and both due now.
    client.cursor.execute(
        "UPDATE postkit_queue.schedules SET next_run_at = now() - interval '1 minute',"
        " cron = CASE name WHEN 'bad' THEN '0 0 30 2 *' END,"
        " every = CASE name WHEN 'good' THEN every END WHERE namespace = %s",
        (client.namespace,),
    )
    start_worker({Q: lambda job: ran.put(job.payload)}, tick_interval=0.2)

    assert next_item(ran, "the good schedule never fired") == {"from": "good"}
    pushed(client, {"from": "push"})
    assert next_item(ran, "the worker stopped handling jobs") == {"from": "push"}
    [bad] = [s for s in client.schedules() if s.name == "bad"]
    assert bad.broken_reason is not None and "cannot compute the next run" in bad.broken_reason


def test_retry_later_refuses_a_delay_the_queue_would_reject() -> None:
    with pytest.raises(InvalidDurationError):
        RetryLater(delay=-1)
    with pytest.raises(InvalidDurationError):
        RetryLater(delay=timedelta(days=31))


def test_async_handlers_run_on_the_event_loop_next_to_sync_ones(
    start_worker: StartWorker, client: QueueClient
) -> None:
    handlers = Handlers()
    seen: list[str] = []

    @handlers.register("async-ok")
    async def async_ok(job: Job) -> None:
        await asyncio.sleep(0)
        seen.append("async-ok")

    @handlers.register("async-bad")
    async def async_bad(job: Job) -> None:
        await asyncio.sleep(0)
        raise PermanentError("no")

    @handlers.register("sync-ok")
    def sync_ok(job: Job) -> None:
        seen.append("sync-ok")

    worker = start_worker(handlers)
    ok = pushed(client, queue="async-ok")
    bad = pushed(client, queue="async-bad")
    plain = pushed(client, queue="sync-ok")

    wait_until(gone(client, ok), "the async job to be acked")
    wait_until(gone(client, plain), "the sync job to be acked")
    dead = wait_until(
        lambda: (found := client.get_job(bad)) is not None and found.state == "dead" and found,
        "the failing async job to be dead-lettered",
    )
    assert dead.errors[-1]["error"].startswith("PermanentError: no\n")
    assert sorted(seen) == ["async-ok", "sync-ok"]
    wait_until(lambda: worker.stats.completed == 2, "the worker to count both acks")


def test_a_push_wakes_an_idle_worker_without_waiting_for_its_poll(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
) -> None:
    handled: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    start_worker({Q: lambda job: handled.put(job.id)}, poll_interval=60.0)
    observer = connect(autocommit=True)
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    wait_until(
        lambda: observer.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
            " AND query LIKE '%%next_run_at%%'",
            (application,),
        ).fetchone(),
        "the worker to start waiting on its listener",
    )

    job_id = pushed(client)
    assert next_item(handled, "the worker slept through the notification", 10) == job_id


def test_an_idle_worker_finds_a_job_whose_notification_never_came_on_its_fallback_poll(
    start_worker: StartWorker, client: QueueClient
) -> None:
    ran: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    start_worker({Q: lambda job: ran.put(job.id)}, poll_interval=0.5)
    first = pushed(client)
    assert next_item(ran, "the first job never ran") == first
    client.cursor.execute("SET postkit_queue.notify = off")  # this session's pushes are silent
    silent = pushed(client)
    assert next_item(ran, "the fallback poll never found the job", 5) == silent


def test_stop_wakes_an_idle_worker_at_once(worker_dsn: str, namespace: str) -> None:
    ran = threading.Event()
    worker = Worker(
        worker_dsn,
        {Q: lambda job: ran.set()},
        namespace=namespace,
        poll_interval=60,
        tick_interval=60,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    with psycopg.connect(worker_dsn) as connection:
        QueueClient(connection.cursor(), namespace=namespace).push(Q, 1)
    wait_for(ran, "the worker to run the job", 10)

    worker.stop()
    thread.join(timeout=10)

    assert not thread.is_alive(), "stop() did not wake the worker before its 60 s poll"


def test_a_worker_stopped_before_it_runs_returns_at_once_and_claims_nothing(
    worker_dsn: str, namespace: str
) -> None:
    """`postkit worker` turns a signal that comes before run() into stop(): the run it then
    starts ends gracefully at once."""
    ran = threading.Event()
    with psycopg.connect(worker_dsn) as connection:
        QueueClient(connection.cursor(), namespace=namespace).push(Q, 1)
    worker = Worker(worker_dsn, {Q: lambda job: ran.set()}, namespace=namespace, **QUIET)
    worker.stop()

    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=10)

    assert not thread.is_alive(), "the stopped worker went on running"
    assert not ran.is_set()


# ---------------------------------------------------------------------------------------------
# Results: what a handler returns.
# ---------------------------------------------------------------------------------------------


def doubled(job: Job) -> dict[str, Any]:
    return {"doubled": job.payload["n"] * 2, "by": "sync"}


async def doubled_async(job: Job) -> dict[str, Any]:
    return {"doubled": job.payload["n"] * 2, "by": "async"}


def doubled_in_transaction(job: Job, cursor: Any) -> dict[str, Any]:
    cursor.execute("SELECT 1")
    return {"doubled": job.payload["n"] * 2, "by": "transactional"}


@pytest.mark.parametrize(
    ("handler", "transactional", "by"),
    [
        (doubled, False, "sync"),
        (doubled_async, False, "async"),
        (doubled_in_transaction, True, "transactional"),
    ],
    ids=["sync", "async", "transactional"],
)
def test_a_worker_keeps_what_its_handler_returns_in_a_queue_that_keeps_results(
    start_worker: StartWorker,
    client: QueueClient,
    worker_dsn: str,
    namespace: str,
    handler: Callable[..., Any],
    transactional: bool,
    by: str,
) -> None:
    client.configure_queue(Q, retain_results=3600)
    handlers = Handlers()
    handlers.add(Q, handler, transactional=transactional)
    with ResultListener.connect(worker_dsn, namespace) as listener:
        start_worker(handlers)
        ids = [pushed(client, {"n": n}) for n in (1, 2, 3)]
        results = [listener.wait_for_result(job_id, timeout=15) for job_id in ids]

    assert [(r.state, r.value) for r in results] == [
        ("completed", {"doubled": 2 * n, "by": by}) for n in (1, 2, 3)
    ]


def test_a_worker_in_a_queue_that_keeps_no_results_acks_as_before(
    start_worker: StartWorker, client: QueueClient
) -> None:
    start_worker({Q: doubled})
    job_id = pushed(client, {"n": 1})
    wait_until(gone(client, job_id), "the job to be acked")

    assert client.result(job_id).state == "unknown"


def test_a_value_that_cannot_be_a_result_acks_the_job_without_one_and_warns_once_per_queue(
    start_worker: StartWorker,
    client: QueueClient,
    worker_dsn: str,
    namespace: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.configure_queue(Q, retain_results=3600)
    returns: dict[int, Any] = {1: {"not", "json"}, 2: "x" * (limits.RESULT_BYTES + 1), 3: [3]}

    def handler(job: Job) -> Any:
        return returns[job.payload["n"]]

    with (
        caplog.at_level("DEBUG", logger="postkit.worker"),
        ResultListener.connect(worker_dsn, namespace) as listener,
    ):
        worker = start_worker({Q: handler}, concurrency=1)
        ids = [pushed(client, {"n": n}) for n in (1, 2, 3)]
        results = [listener.wait_for_result(job_id, timeout=15) for job_id in ids]

    assert [(r.state, r.value) for r in results] == [
        ("completed", None),
        ("completed", None),
        ("completed", [3]),
    ]
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 3, "the worker to count what it settled")
    dropped = [r for r in caplog.records if getattr(r, "event", None) == "result_dropped"]
    assert [(r.levelname, r.job_id) for r in dropped] == [  # type: ignore[attr-defined]
        ("WARNING", ids[0]),
        ("DEBUG", ids[1]),
    ]
    assert "not JSON-serializable" in dropped[0].getMessage()
    assert "bytes as JSON text" in dropped[1].getMessage()


# ---------------------------------------------------------------------------------------------
# Concurrency, transactions, heartbeats.
# ---------------------------------------------------------------------------------------------


def test_after_run_returns_the_worker_holds_no_connection(
    worker_dsn: str, namespace: str, connect: Callable[..., psycopg.Connection[Any]]
) -> None:
    admin = connect(autocommit=True)
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]

    def connections() -> int:
        row = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,)
        ).fetchone()
        return int(row[0]) if row else 0

    worker = Worker(worker_dsn, {Q: lambda job: None}, namespace=namespace, poll_interval=30)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(
        lambda: admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
            " AND query LIKE '%%next_run_at%%'",
            (application,),
        ).fetchone(),
        "the worker to start waiting on its listener",
    )
    worker.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    # The listener too: left waiting, it met the server going away after "stopped" and logged
    # a reconnect.
    wait_until(lambda: connections() == 0, "the stopped worker's connections to close", 2)


def test_concurrency_runs_that_many_jobs_at_once(
    start_worker: StartWorker, client: QueueClient
) -> None:
    barrier = threading.Barrier(5)  # four handlers and this test

    def meet(job: Job) -> None:
        barrier.wait(timeout=15)

    worker = start_worker({Q: meet}, concurrency=4)
    job_ids = [pushed(client, {"n": n}) for n in range(4)]

    barrier.wait(timeout=15)  # raises BrokenBarrierError unless four jobs run at once
    for job_id in job_ids:
        wait_until(gone(client, job_id), f"job {job_id} to be acked")
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 4, "the worker to count what it settled")


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]]) -> Iterator[sql.Identifier]:
    """A table for handlers to write to."""
    admin = connect(autocommit=True)
    name = sql.Identifier(f"worker_test_{uuid.uuid4().hex[:12]}")
    admin.execute(sql.SQL("CREATE TABLE {} (job_id bigint PRIMARY KEY)").format(name))
    yield name
    admin.execute(sql.SQL("DROP TABLE {}").format(name))


def written(client: QueueClient, table: sql.Identifier) -> list[int]:
    client.cursor.execute(sql.SQL("SELECT job_id FROM {} ORDER BY job_id").format(table))
    return [row[0] for row in client.cursor.fetchall()]


def test_a_transactional_handler_commits_its_writes_with_the_ack(
    start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))

    worker = start_worker(handlers)
    job_id = pushed(client)
    wait_until(gone(client, job_id), "the job to be acked")
    assert written(client, table) == [job_id]
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 1, "the worker to count what it settled")


def test_a_failing_transactional_handler_leaves_no_writes_and_nacks(
    start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record_then_fail(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))
        raise RuntimeError("after the write")

    start_worker(handlers)
    job_id = pushed(client, backoff_base=60)
    job = wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.errors and found,
        "the job to be nacked",
    )
    assert job.errors[0]["error"].startswith("RuntimeError: after the write\n")
    assert written(client, table) == []


def test_a_stale_claim_rolls_back_the_handlers_writes_and_does_not_ack(
    start_worker: StartWorker,
    client: QueueClient,
    table: sql.Identifier,
    make_client: Callable[[], QueueClient],
    shift_clock: Shift,
) -> None:
    ticker = make_client()
    rescued: list[int] = []
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record_while_rescued(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))
        # Another process decides this claim expired and hands the job back to the queue.
        shift_clock(ticker, 3600)
        rescued.append(ticker.tick_timeouts())
        ticker.cursor.connection.commit()

    # A long visibility timeout: no heartbeat touches the row while the ticker rescues it.
    worker = start_worker(handlers, visibility_timeout=600)
    job_id = pushed(client)

    wait_until(lambda: worker.stats.stale == 1, "the stale ack to be recorded")
    assert rescued == [1]
    assert written(client, table) == [], "the handler's write rolled back with the stale ack"
    job = client.get_job(job_id)
    assert job is not None, "the stale worker did not ack the job"
    assert (job.state, job.attempts) == ("pending", 1)
    assert [entry["kind"] for entry in job.errors] == ["timeout"]
    assert worker.stats.completed == 0


def test_a_backlog_of_transactional_jobs_drains_without_waiting_for_the_poll(
    start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def record(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))

    client.push_batch(Q, [{} for _ in range(40)])
    # Four slots, nothing claimed ahead, a 30 s poll: ten rounds of four jobs, each started by
    # the end of the last one's transactions.
    worker = start_worker(handlers, concurrency=4, prefetch=0)
    wait_until(
        lambda: worker.stats.completed == 40,
        "the backlog to drain without a stall between batches",
        10,
    )
    assert len(written(client, table)) == 40


def test_a_healthy_transactional_job_is_never_reported_lost(
    start_worker: StartWorker, client: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def slow(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        time.sleep(0.002 * (job.id % 7))  # uneven work on purpose: settles interleave

    client.push_batch(Q, [{} for _ in range(400)])
    with caplog.at_level("WARNING", logger="postkit.worker"):
        # A heartbeat every 20 ms, so that many land while a job's ack commits, and a short
        # poll, so that the drain does not depend on how finished jobs wake the loop.
        worker = start_worker(handlers, concurrency=8, visibility_timeout=0.06, poll_interval=0.05)
        wait_until(lambda: worker.stats.completed == 400, "all the jobs to be acked", 60)
    lost = [record.getMessage() for record in caplog.records if "lost the claim" in record.msg]
    assert lost == []


@pytest.mark.parametrize("override", [None, 2.0], ids=["queue_policy", "worker_override"])
def test_claims_last_the_queues_visibility_timeout_unless_the_worker_overrides_it(
    start_worker: StartWorker,
    client: QueueClient,
    make_client: Callable[[], QueueClient],
    override: float | None,
) -> None:
    started = threading.Event()
    finish = threading.Event()

    def long_job(job: Job) -> None:
        started.set()
        finish.wait(timeout=30)

    client.configure_queue(Q, visibility_timeout=1.0)
    start_worker({Q: long_job}, visibility_timeout=override)
    job_id = pushed(client)
    wait_for(started, "the job to start")
    claimed = client.get_job(job_id)
    assert claimed is not None and claimed.visible_until and claimed.claimed_at
    lasts = (claimed.visible_until - claimed.claimed_at).total_seconds()
    assert lasts == pytest.approx(override or 1.0, abs=0.01)

    # The heartbeats follow the claim's own timeout: no rescue over three of them.
    ticker = make_client()
    deadline = time.monotonic() + 3 * (override or 1.0)
    while time.monotonic() < deadline:
        assert ticker.tick_timeouts() == 0, "a heartbeat was missed: the job was rescued"
        ticker.cursor.connection.commit()
        time.sleep(0.2)  # the probes are the point: time passes, and no claim may expire
    finish.set()
    wait_until(gone(client, job_id), "the job to be acked")


def test_heartbeats_keep_a_long_job_claimed_past_its_visibility_timeout(
    start_worker: StartWorker, make_client: Callable[[], QueueClient], client: QueueClient
) -> None:
    started = threading.Event()
    finish = threading.Event()
    attempts: list[int] = []

    def long_job(job: Job) -> None:
        attempts.append(job.attempts)
        started.set()
        finish.wait(timeout=30)

    worker = start_worker({Q: long_job}, visibility_timeout=1.0)
    job_id = pushed(client)
    wait_for(started, "the job to start")
    first = client.get_job(job_id)
    assert first is not None and first.visible_until is not None

    ticker = make_client()
    deadline = time.monotonic() + 3.5  # three and a half visibility timeouts
    ticks = 0
    while time.monotonic() < deadline:
        assert ticker.tick_timeouts() == 0, "a heartbeat was missed: the job was rescued"
        ticker.cursor.connection.commit()
        ticks += 1
        time.sleep(0.3)  # the probes are the point: time passes, and no claim may expire
    assert ticks >= 10
    running = client.get_job(job_id)
    assert running is not None and running.state == "running"
    assert running.claim_token == first.claim_token
    assert running.visible_until is not None and running.visible_until > first.visible_until

    finish.set()
    wait_until(gone(client, job_id), "the job to be acked")
    assert attempts == [1]
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 1, "the worker to count what it settled")


def test_a_schedule_fires_within_a_second_of_each_due_time_while_a_worker_runs(
    start_worker: StartWorker, client: QueueClient
) -> None:
    fired: stdlib_queue.SimpleQueue[Job] = stdlib_queue.SimpleQueue()
    # The tick (rescues, retention) is a minute away: only the schedule's own wake-up fires it.
    start_worker({Q: fired.put}, tick_interval=60.0)
    schedule = client.create_schedule("every-2s", Q, {}, every=2)
    runs = [next_item(fired, f"run {number} of the schedule never came") for number in range(3)]
    due = schedule.next_run_at
    for run in runs:
        late = (run.created_at - due).total_seconds()
        assert 0 <= late < 1.0, f"fired {late:.2f}s after its due time {due}"
        due += timedelta(seconds=2)


def test_a_handler_past_its_timeout_has_its_attempt_timed_out_and_its_slot_taken_over(
    start_worker: StartWorker, client: QueueClient
) -> None:
    release = threading.Event()
    ran: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    handlers = Handlers()

    @handlers.register(Q, timeout=0.5)
    def work(job: Job) -> None:
        if job.payload.get("block"):
            release.wait(timeout=30)
        ran.put(job.id)

    worker = start_worker(handlers, concurrency=1, prefetch=0)
    stuck = pushed(client, {"block": True}, backoff_base=60)
    timed_out = wait_until(
        lambda: (job := client.get_job(stuck)) is not None and job.errors and job,
        "the stuck handler's job to be nacked",
    )
    assert timed_out.errors[0]["error"] == "HandlerTimeout: the handler ran past its 0.5s limit"
    assert timed_out.attempts == 1

    # Its only slot is free again, although the stuck handler still runs.
    after = pushed(client)
    assert next_item(ran, "the next job never ran beside the stuck handler") == after
    assert not release.is_set()
    release.set()
    assert next_item(ran, "the stuck handler never returned") == stuck
    wait_until(gone(client, after), "the next job to be acked")
    job = client.get_job(stuck)
    assert job is not None and job.state == "pending", "a late outcome settled nothing"
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(
        lambda: (worker.stats.completed, worker.stats.retried) == (1, 1),
        "the worker to count what it settled",
    )


def test_a_transactional_handler_past_its_timeout_has_its_writes_rolled_back(
    start_worker: StartWorker,
    client: QueueClient,
    table: sql.Identifier,
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = threading.Event()
    handlers = Handlers()

    @handlers.register(Q, transactional=True, timeout=0.5)
    def record(job: Job, cursor: psycopg.Cursor[Any]) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s)").format(table), (job.id,))
        if job.payload.get("block"):
            release.wait(timeout=30)

    # One slot, and a pool of three connections: as many as the stuck handlers hold.
    worker = start_worker(handlers, concurrency=1, prefetch=0)
    stuck = [pushed(client, {"block": True}, backoff_base=60) for _ in range(3)]
    wait_until(
        lambda: all((job := client.get_job(job_id)) and job.errors for job_id in stuck),
        "the stuck handlers' jobs to be nacked",
    )
    # More jobs run on the slot while the stuck handlers hold their connections.
    others = [pushed(client), pushed(client)]
    wait_until(lambda: worker.stats.completed == 2, "the next jobs to run beside the stuck ones")
    with caplog.at_level("WARNING", logger="postkit.worker"):
        release.set()
        wait_until(
            lambda: sum("ended after its timeout" in record.msg for record in caplog.records) == 3,
            "the stuck handlers to end",
        )
    for job_id in stuck:
        job = client.get_job(job_id)
        assert job is not None and job.state == "pending"
    assert written(client, table) == sorted(others), "the stuck handlers' writes rolled back"


def test_stop_never_releases_a_job_whose_handler_is_still_running(
    worker_dsn: str, namespace: str, client: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    started, finish = threading.Event(), threading.Event()

    def long_job(job: Job) -> None:
        started.set()
        finish.wait(timeout=30)

    worker = Worker(worker_dsn, {Q: long_job}, namespace=namespace, grace_period=0.2)
    thread = threading.Thread(target=worker.run, daemon=True)
    with caplog.at_level("INFO", logger="postkit.worker"):
        thread.start()
        job_id = pushed(client)
        wait_for(started, "the job to start")
        claimed = client.get_job(job_id)
        worker.stop()
        wait_until(
            lambda: any("end of the grace period" in record.msg for record in caplog.records),
            "the grace period never ended",
        )
        kept = client.get_job(job_id)
        assert kept is not None and claimed is not None
        assert (kept.state, kept.claim_token) == ("running", claimed.claim_token)
        finish.set()
        thread.join(timeout=15)
    assert not thread.is_alive()
    assert client.get_job(job_id) is None, "the job that finished after the grace was acked"
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(
        lambda: (worker.stats.completed, worker.stats.released) == (1, 0),
        "the worker to count what it settled",
    )


def test_a_delayed_job_does_not_run_before_it_falls_due(
    start_worker: StartWorker, client: QueueClient
) -> None:
    ran: stdlib_queue.SimpleQueue[float] = stdlib_queue.SimpleQueue()
    start_worker({Q: lambda job: ran.put(time.monotonic())})

    pushed_at = time.monotonic()
    pushed(client, delay=1.0)
    ran_at = next_item(ran, "the delayed job never ran")
    assert ran_at - pushed_at >= 0.9, f"ran {ran_at - pushed_at:.2f}s after the push"


def test_the_worker_recovers_from_dropped_connections(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
) -> None:
    handled: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    worker = start_worker({Q: lambda job: handled.put(job.id)})
    first = pushed(client)
    assert next_item(handled, "the first job never ran") == first
    wait_until(gone(client, first), "the first job to be acked")

    admin = connect(autocommit=True)
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    # Wait until the worker idles on its listener, so both its pool and its LISTEN connection
    # are cut.
    wait_until(
        lambda: admin.execute(
            "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND state = 'idle'"
            " AND query LIKE '%%next_run_at%%'",
            (application,),
        ).fetchone(),
        "the worker to start waiting on its listener",
    )
    [(terminated,)] = admin.execute(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
        " WHERE application_name = %s",
        (application,),
    ).fetchall()
    assert terminated >= 2, "expected to cut the pool's and the listener's connections"

    second = pushed(client)
    assert next_item(handled, "the worker never came back", 20) == second
    wait_until(gone(client, second), "the second job to be acked")
    # The worker counts an ack once its commit returns: a moment after the job is gone.
    wait_until(lambda: worker.stats.completed == 2, "the worker to count what it settled")


# ---------------------------------------------------------------------------------------------
# Maintenance, off the claim path.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def stuck_prune(
    client: QueueClient, connect: Callable[..., psycopg.Connection[Any]]
) -> Iterator[psycopg.Connection[Any]]:
    """An outcome counter past its two hours of retention, locked by an open transaction: a
    prune's DELETE of it waits until that transaction ends. Yields the connection holding the
    lock; its transaction is rolled back afterwards."""
    client.cursor.execute(
        "INSERT INTO postkit_queue.queue_stats (namespace, queue, minute, slot)"
        " VALUES (%s, %s, now() - interval '3 hours', 0)",
        (client.namespace, Q),
    )
    holder = connect()
    holder.execute(
        "SELECT 1 FROM postkit_queue.queue_stats WHERE namespace = %s FOR UPDATE",
        (client.namespace,),
    )
    yield holder
    holder.rollback()


def blocked_prune(
    monitor: psycopg.Connection[Any], worker_dsn: str, holder: psycopg.Connection[Any]
) -> Any:
    """The pid of the worker's backend whose prune waits on ``holder``'s lock, or None."""
    application = psycopg.conninfo.conninfo_to_dict(worker_dsn)["application_name"]
    row = monitor.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
        " AND query LIKE '%%prune%%' AND %s = ANY (pg_blocking_pids(pid))",
        (application, holder.info.backend_pid),
    ).fetchone()
    return row[0] if row else None


def test_a_prune_stuck_behind_a_lock_does_not_delay_claims(
    start_worker: StartWorker,
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
    stuck_prune: psycopg.Connection[Any],
) -> None:
    monitor = connect(autocommit=True)
    handled: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    # The first maintenance round, retention included, runs as the worker starts.
    start_worker({Q: lambda job: handled.put(job.id)})
    prune = wait_until(
        lambda: blocked_prune(monitor, worker_dsn, stuck_prune),
        "the worker's prune never waited on the locked row",
    )

    job_id = pushed(client)

    assert next_item(handled, "the job waited for the prune", 10) == job_id
    wait_until(gone(client, job_id), "the job to be acked while the prune waited")
    assert blocked_prune(monitor, worker_dsn, stuck_prune) == prune, "the prune stopped waiting"
    stuck_prune.rollback()
    wait_until(
        lambda: (
            not client.cursor.execute(
                "SELECT 1 FROM postkit_queue.queue_stats WHERE namespace = %s"
                " AND minute < now() - interval '2 hours'",
                (client.namespace,),
            ).fetchone()
        ),
        "the prune never went on once the lock was gone",
    )


def test_stop_cancels_a_maintenance_step_stuck_behind_a_lock(
    client: QueueClient,
    connect: Callable[..., psycopg.Connection[Any]],
    worker_dsn: str,
    namespace: str,
    stuck_prune: psycopg.Connection[Any],
) -> None:
    monitor = connect(autocommit=True)
    worker = Worker(worker_dsn, {Q: lambda job: None}, namespace=namespace, poll_interval=30)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    wait_until(
        lambda: blocked_prune(monitor, worker_dsn, stuck_prune),
        "the worker's prune never waited on the locked row",
    )

    worker.stop()
    thread.join(timeout=10)

    assert not thread.is_alive(), "the stuck prune held the worker's shutdown"
    assert blocked_prune(monitor, worker_dsn, stuck_prune) is None


# ---------------------------------------------------------------------------------------------
# Real processes, real signals.
# ---------------------------------------------------------------------------------------------

WORKER_SCRIPT = textwrap.dedent(
    """
    import logging
    import os
    import sys
    import time

    from postkit.worker import Handlers, Worker

    dsn, namespace = sys.argv[1], sys.argv[2]
    grace, visibility = float(sys.argv[3]), float(sys.argv[4])
    timeout, concurrency = float(sys.argv[5]), int(sys.argv[6])
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="log %(message)s")
    handlers = Handlers()


    def say(line):
        # One write, line and newline together, as the log handler's are: print writes the
        # newline separately, and a log line from another thread could land in between.
        sys.stdout.write(line + "\\n")
        sys.stdout.flush()


    @handlers.register("work")
    def work(job):
        say(f"started {job.id}")
        go = job.payload.get("go")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (go and os.path.exists(go)):
            time.sleep(0.01)  # the job runs until the test creates its go file
        say(f"finished {job.id}")


    Worker(
        dsn,
        handlers,
        namespace=namespace,
        grace_period=grace,
        visibility_timeout=visibility,
        handler_timeout=timeout,
        concurrency=concurrency,
    ).run()
    say("exited")
    """
)


@pytest.fixture
def spawn_worker(
    tmp_path: Path, dsn: str, namespace: str
) -> Iterator[Callable[..., WorkerProcess]]:
    script = tmp_path / "worker_script.py"
    script.write_text(WORKER_SCRIPT, encoding="utf-8")
    spawned: list[WorkerProcess] = []

    def _spawn(
        *, grace: float = 1.0, visibility: float = 30.0, timeout: float = 60.0, concurrency: int = 8
    ) -> WorkerProcess:
        arguments = [dsn, namespace, str(grace), str(visibility), str(timeout), str(concurrency)]
        worker = WorkerProcess([sys.executable, str(script), *arguments], cwd=script.parent)
        spawned.append(worker)
        return worker

    yield _spawn
    for worker in spawned:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait(timeout=10)


def test_sigterm_releases_a_job_not_started_and_keeps_a_running_ones_claim_until_it_times_out(
    spawn_worker: Callable[..., WorkerProcess], client: QueueClient
) -> None:
    running_id = pushed(client)
    waiting_id = pushed(client)
    # One slot: the second job is claimed ahead and waits for it.
    worker = spawn_worker(grace=0.5, timeout=3.0, concurrency=1)
    assert worker.expect("started") == f"started {running_id}"
    waiting = wait_until(
        lambda: (job := client.get_job(waiting_id)) is not None and job.state == "running" and job,
        "the second job to be claimed ahead",
    )
    assert waiting.attempts == 1

    worker.process.send_signal(signal.SIGTERM)
    worker.expect(f"log released job {waiting_id}")
    worker.expect(f"log job {running_id} still running at the end of the grace period")
    released = client.get_job(waiting_id)
    assert released is not None
    assert (released.state, released.attempts, released.worker_id) == ("pending", 0, None)
    # The job whose handler runs keeps its claim: no other worker can take it.
    kept = client.get_job(running_id)
    assert kept is not None and kept.state == "running" and kept.attempts == 1

    worker.expect(f"log job {running_id} ran past its handler timeout (3s)")
    assert worker.wait() == 0, worker.output
    assert f"finished {running_id}" not in worker.output
    timed_out = client.get_job(running_id)
    assert timed_out is not None and timed_out.state == "pending"
    assert timed_out.attempts == 1
    assert [entry["kind"] for entry in timed_out.errors] == ["nack"]
    assert timed_out.errors[0]["error"] == "HandlerTimeout: the handler ran past its 3s limit"


def test_sigterm_lets_a_job_finish_within_the_grace_period(
    spawn_worker: Callable[..., WorkerProcess], client: QueueClient, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    job_id = pushed(client, {"go": str(go)})
    worker = spawn_worker(grace=10.0, visibility=30.0)
    worker.expect(f"started {job_id}")

    worker.process.send_signal(signal.SIGTERM)
    worker.expect("log signal SIGTERM")
    go.touch()  # the job finishes only now, during the shutdown
    worker.expect(f"finished {job_id}")
    assert worker.wait() == 0, worker.output
    assert any(line.startswith(f"log completed job {job_id}") for line in worker.output)
    assert client.get_job(job_id) is None, "the job finished in the grace period was acked"


def test_a_killed_workers_job_is_redelivered_after_its_visibility_timeout(
    spawn_worker: Callable[..., WorkerProcess], client: QueueClient, start_worker: StartWorker
) -> None:
    job_id = pushed(client)
    doomed = spawn_worker(visibility=1.0)
    doomed.expect(f"started {job_id}")
    os.kill(doomed.process.pid, signal.SIGKILL)
    assert doomed.process.wait(timeout=10) == -signal.SIGKILL

    redelivered: stdlib_queue.SimpleQueue[Job] = stdlib_queue.SimpleQueue()
    worker = start_worker({Q: redelivered.put}, tick_interval=0.2)
    job = next_item(redelivered, "the job to be redelivered")
    assert job.id == job_id
    assert job.attempts == 2, "the killed worker's attempt counts"
    assert [entry["kind"] for entry in job.errors] == ["timeout"]
    wait_until(gone(client, job_id), "the redelivered job to be acked")
    # The worker counts a rescue once its commit returns: a moment after the job is back.
    wait_until(lambda: worker.stats.rescued == 1, "the worker to count its rescue")


def test_the_queues_a_worker_serves_stay_known_once_their_jobs_are_done(
    start_worker: StartWorker, client: QueueClient
) -> None:
    job_id = pushed(client)
    done: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()
    start_worker({Q: lambda job: done.put(job.id), "idle": lambda job: None})

    assert next_item(done, "the worker never ran its job") == job_id
    wait_until(gone(client, job_id), "the job to be acked")
    assert {Q, "idle"} <= set(client.known_queues())


def test_a_worker_leaves_no_setting_on_any_session_it_used(
    dsn: str, namespace: str, client: QueueClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its pool's, its listener's and its maintenance's: each connection, as it is closed,
    holds only the server's settings (and the claim's resume point, a hint of the SQL module
    that docs/guarantees.md describes), so a pool or a pooler in session mode that hands it on
    hands on nothing of the worker's."""
    probe = f"pk-settings-{uuid.uuid4().hex[:8]}"
    worker_dsn = psycopg.conninfo.make_conninfo(dsn, application_name=probe)
    left: dict[int, list[tuple[str, str]]] = {}
    close = psycopg.Connection.close

    def inspect_then_close(connection: psycopg.Connection[Any]) -> None:
        if (
            not connection.closed
            and connection.info.parameter_status("application_name") == probe
            and connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        ):
            left[connection.info.backend_pid] = connection.execute(
                "SELECT name, setting FROM pg_catalog.pg_settings"
                " WHERE source = 'session' AND name NOT LIKE 'postkit_queue.resume_%'"
            ).fetchall()
        close(connection)

    monkeypatch.setattr(psycopg.Connection, "close", inspect_then_close)
    handlers = Handlers()
    handlers.add(Q, lambda job: None)
    handlers.add("written", lambda job, cursor: None, transactional=True)
    with worker_threads() as run:
        worker = run(Worker(worker_dsn, handlers, namespace=namespace, **QUIET))
        client.push_batch(Q, [{} for _ in range(20)])
        client.push_batch("written", [{} for _ in range(5)])
        wait_until(lambda: worker.stats.completed == 25, "the worker to settle every job")
        time.sleep(0.5)  # idle: the listener waits, and claims on the next push's notification
        client.push(Q, {})
        wait_until(lambda: worker.stats.completed == 26, "the worker to settle the last push")

    # The pool's connections, the listener's and the maintenance's, each inspected.
    assert len(left) >= 3, left
    assert all(settings == [] for settings in left.values()), left
