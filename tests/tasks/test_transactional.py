"""Transactional tasks: the function takes a cursor in its job's ack's transaction first, which
no push passes; a real worker commits the function's writes with the ack exactly once, rolls
them back when the claim went stale or the payload does not fit, and runs the transaction
where ``transaction=`` says."""

from __future__ import annotations

import contextlib
import queue as stdlib_queue
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.errors import InvalidArgumentsError
from postkit.queue import Job, QueueClient
from postkit.tasks import App, Task, TaskSettings, TransactionalTask
from tests.signals import wait_until
from tests.tasks.test_tasks import NoSQL
from tests.tasks.test_tasks_worker import dead, gone, next_item, pushed_from_sql

StartWorker = Callable[..., Any]
JobOf = Callable[[int | None], Job]
Shift = Callable[[QueueClient, float], None]


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]]) -> Iterator[sql.Identifier]:
    """A table for tasks to write to: one row per order, so a second write of one fails."""
    admin = connect(autocommit=True)
    name = sql.Identifier(f"tasks_test_{uuid.uuid4().hex[:12]}")
    admin.execute(sql.SQL("CREATE TABLE {} (order_id bigint PRIMARY KEY, note text)").format(name))
    yield name
    admin.execute(sql.SQL("DROP TABLE {}").format(name))


def written(client: QueueClient, table: sql.Identifier) -> list[tuple[int, str]]:
    client.cursor.execute(sql.SQL("SELECT order_id, note FROM {} ORDER BY 1").format(table))
    return [tuple(row) for row in client.cursor.fetchall()]  # type: ignore[misc]


def insert(table: sql.Identifier) -> sql.Composed:
    return sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(table)


# ---------------------------------------------------------------------------------------------
# Declaring and pushing.
# ---------------------------------------------------------------------------------------------


def test_the_cursor_is_no_argument_of_the_push_nor_of_the_payload(
    app: App, conn: psycopg.Connection[Any], job_of: JobOf
) -> None:
    @app.task(queue="receipts", transactional=True)
    def record(cursor: Any, order_id: int, *, note: str = "") -> None: ...

    job_id = record.push(conn.cursor(), 7, note="gift")
    conn.commit()

    assert isinstance(record, TransactionalTask)
    assert job_of(job_id).payload == {"args": [], "kwargs": {"order_id": 7, "note": "gift"}}
    assert repr(record) == "<TransactionalTask record(order_id, *, note='') on queue 'receipts'>"
    with pytest.raises(InvalidArgumentsError, match="unexpected keyword argument 'cursor'"):
        record.push(NoSQL(), cursor=None, order_id=7)
    spec = app.handlers["receipts"]
    assert (spec.transactional, spec.transaction, spec.holds_pool_connection) == (True, None, True)


def test_calling_a_transactional_task_runs_its_function_with_the_cursor_given(app: App) -> None:
    @app.task(queue="receipts", transactional=True)
    def record(cursor: Any, order_id: int) -> tuple[Any, int]:
        return cursor, order_id

    assert record("the cursor", 7) == ("the cursor", 7)


def test_a_transactional_task_is_refused_a_function_without_a_cursor_first_or_async(
    app: App,
) -> None:
    def keywords_only(*, order_id: int) -> None: ...

    async def asynchronous(cursor: Any, order_id: int) -> None: ...

    with pytest.raises(InvalidArgumentsError, match="keywords_only: a transactional task takes"):
        app.task(queue="a", transactional=True)(keywords_only)
    with pytest.raises(InvalidArgumentsError, match="takes the cursor as its first parameter"):
        app.task(queue="b", transactional=True)(lambda: None)
    with pytest.raises(ValueError, match="transactional tasks must be synchronous"):
        app.task(queue="c", transactional=True)(asynchronous)
    with pytest.raises(ValueError, match="only a transactional task runs in a given transaction"):
        app.task(queue="d", transaction=contextlib.nullcontext)  # type: ignore[call-overload]
    assert app.tasks == {} and len(app.handlers) == 0


def test_a_task_and_a_transactional_task_each_refuse_the_others_settings() -> None:
    def record(cursor: Any, order_id: int) -> None: ...

    with pytest.raises(ValueError, match=r"a Task with settings\.transactional=True: "):
        Task("ns", record, TaskSettings(queue="q", transactional=True))
    with pytest.raises(ValueError, match=r"a TransactionalTask with settings\.transactional=False"):
        TransactionalTask("ns", record, TaskSettings(queue="q"))


# ---------------------------------------------------------------------------------------------
# A real worker.
# ---------------------------------------------------------------------------------------------


def test_a_transactional_tasks_write_commits_with_its_ack_exactly_once(
    app: App, start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    @app.task(queue="receipts", transactional=True)
    def record(cursor: psycopg.Cursor[Any], order_id: int, *, note: str = "") -> None:
        cursor.execute(insert(table), (order_id, note))

    worker = start_worker(app)
    ids = [record.push(client.cursor, 1), *record.push_many(client.cursor, [{"order_id": 2}])]

    for job_id in ids:
        wait_until(gone(client, job_id), f"job {job_id} to be acked")
    assert written(client, table) == [(1, ""), (2, "")]
    wait_until(lambda: worker.stats.completed == 2, "the worker to count what it settled")
    assert (worker.stats.retried, worker.stats.dead_lettered, worker.stats.stale) == (0, 0, 0)


def test_a_stale_claim_rolls_back_the_tasks_write_and_does_not_ack(
    app: App,
    start_worker: StartWorker,
    client: QueueClient,
    table: sql.Identifier,
    make_client: Callable[[], QueueClient],
    shift_clock: Shift,
) -> None:
    ticker = make_client()
    rescued: list[int] = []

    @app.task(queue="receipts", transactional=True)
    def record_while_rescued(cursor: psycopg.Cursor[Any], order_id: int) -> None:
        cursor.execute(insert(table), (order_id, "stale"))
        # Another process decides this claim expired and hands the job back to the queue.
        shift_clock(ticker, 3600)
        rescued.append(ticker.tick_timeouts())
        ticker.cursor.connection.commit()

    # A long visibility timeout: no heartbeat touches the row while the ticker rescues it.
    worker = start_worker(app, visibility_timeout=600)
    job_id = record_while_rescued.push(client.cursor, 1)
    assert job_id is not None

    wait_until(lambda: worker.stats.stale == 1, "the stale ack to be recorded")
    assert rescued == [1]
    assert written(client, table) == [], "the task's write rolled back with the stale ack"
    job = client.get_job(job_id)
    assert job is not None, "the stale worker did not ack the job"
    assert (job.state, job.attempts) == ("pending", 1)
    assert [entry["kind"] for entry in job.errors] == ["timeout"]
    assert worker.stats.completed == 0


def test_a_payload_that_does_not_fit_is_dead_lettered_without_the_tasks_write(
    app: App, start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    ran: stdlib_queue.SimpleQueue[int] = stdlib_queue.SimpleQueue()

    @app.task(queue="receipts", transactional=True, max_attempts=5)
    def record(cursor: psycopg.Cursor[Any], order_id: int) -> None:
        cursor.execute(insert(table), (order_id, "ok"))
        ran.put(order_id)

    worker = start_worker(app)
    bad = pushed_from_sql(client, "receipts", '{"kwargs": {"cursor": 1, "order_id": 1}}')

    job = dead(client, bad)
    [entry] = job.errors
    assert (entry["kind"], job.attempts) == ("fail", 1), "dead at once, without retries"
    assert entry["error"].startswith(
        "PermanentError: the payload does not fit record(order_id): got an unexpected keyword "
        "argument 'cursor'\n"
    ), entry["error"]
    good = record.push(client.cursor, 2)
    assert next_item(ran, "the good job to run") == 2
    wait_until(gone(client, good), "the good job to be acked")
    assert written(client, table) == [(2, "ok")]
    assert worker.stats.dead_lettered == 1


def test_transaction_runs_the_tasks_transaction_where_it_says(
    app: App,
    dsn: str,
    start_worker: StartWorker,
    client: QueueClient,
    table: sql.Identifier,
) -> None:
    """``transaction=`` passes through to ``Handlers.add``: the task's write and the ack run on
    the application's connection, which the factory opens and commits."""
    application = f"app-{uuid.uuid4().hex[:8]}"
    used: list[str] = []

    @contextlib.contextmanager
    def on_the_applications_connection() -> Iterator[psycopg.Cursor[Any]]:
        with psycopg.connect(dsn, application_name=application) as connection:
            used.append("begun")
            with connection.transaction(), connection.cursor() as cursor:
                yield cursor
            used.append("committed")

    @app.task(queue="receipts", transactional=True, transaction=on_the_applications_connection)
    def record(cursor: psycopg.Cursor[Any], order_id: int) -> None:
        cursor.execute("SELECT current_setting('application_name')")
        note = cursor.fetchone()[0]  # type: ignore[index]
        cursor.execute(insert(table), (order_id, note))

    assert app.handlers["receipts"].transaction is on_the_applications_connection
    start_worker(app)
    job_id = record.push(client.cursor, 3)

    wait_until(gone(client, job_id), "the job to be acked")
    assert written(client, table) == [(3, application)]
    wait_until(lambda: used == ["begun", "committed"], "the factory's transaction to commit")
