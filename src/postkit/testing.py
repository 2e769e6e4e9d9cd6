"""Testing helpers for applications' own test suites: a pytest plugin, on a real PostgreSQL.

Load it in a test suite's top-level ``conftest.py`` with ``pytest_plugins = ["postkit.testing"]``
(or run ``pytest -p postkit.testing``); it is not loaded on its own. It gives:

- the fixture ``postkit_database``: the DSN of a database with the queue schema installed,
  fresh for each test and dropped after it. The schema is installed once per test session into
  a template database, and each test's database is a copy of it (``CREATE DATABASE ...
  TEMPLATE``), made while the previous test runs and dropped in the background after it. The
  server is the one ``--postkit-dsn`` or ``POSTKIT_TEST_DSN`` names (a DSN whose role may
  create databases), else an embedded PostgreSQL started for the session in a temporary
  directory;
- the fixture ``postkit_client``: a ``QueueClient`` on a connection (not autocommit) to that
  database, in the namespace of the fixture ``postkit_namespace`` ("default"; override that
  fixture to change it);
- :func:`drain`, which runs handlers inline until the queues are empty, and :func:`pushed_jobs`
  and :func:`assert_pushed`, which read what is queued.

Nothing here commits: the helpers work in the client's current transaction, so what a test
pushes is visible to :func:`drain` at once, and the database goes away after the test anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Collection, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

from postkit.embedded import EmbeddedServer
from postkit.errors import PostkitError
from postkit.queue import Job, Outcome, QueueClient, install
from postkit.tasks import App
from postkit.worker import Handlers
from postkit.worker.claims import Claims
from postkit.worker.handlers import HandlerSpec
from postkit.worker.job_executor import JobExecutor
from postkit.worker.metrics import NO_METRICS
from postkit.worker.outcomes import OutcomeLog
from postkit.worker.stats import WorkerStats

T = TypeVar("T")

DSN_VARIABLE = "POSTKIT_TEST_DSN"
"""The environment variable that names the server to test on (beside ``--postkit-dsn``)."""


class DrainLimitError(PostkitError):
    """:func:`drain` claimed ``max_jobs`` jobs and the queues were still not empty (handlers
    that keep pushing jobs, or more work than the limit). ``jobs`` is what it did so far."""

    def __init__(self, message: str, jobs: dict[int, DrainedJob]) -> None:
        super().__init__(message)
        self.jobs = jobs


@dataclass
class DrainedJob:
    """What :func:`drain` did with one job."""

    id: int
    queue: str
    payload: Any
    state: str = "running"
    """'completed', 'dead' (dead-lettered), or 'stale' (its claim was lost meanwhile);
    'running' only in :class:`DrainLimitError`'s ``jobs``: drain stopped before it ended."""
    attempts: int = 0
    """Runs of its handler in this drain."""
    retries: int = 0
    """Nacks that scheduled another attempt."""
    errors: list[str] = field(default_factory=list)
    """Each failed run's error, as the worker writes it into the job's history, oldest first."""
    result: Any = None
    """What its handler returned, once it completed."""

    @property
    def error(self) -> str | None:
        """The last error, if any."""
        return self.errors[-1] if self.errors else None


def drain(
    client: QueueClient,
    app_or_handlers: App | Handlers,
    queue: str | Collection[str] | None = None,
    *,
    max_jobs: int = 1000,
) -> dict[int, DrainedJob]:
    """Run handlers inline, in this process, until their queues have no pending or scheduled
    job left, and return what became of each job, by id.

    ``app_or_handlers`` is a :class:`~postkit.worker.Handlers` (its jobs are those of the
    client's namespace) or a typed-tasks :class:`~postkit.tasks.App` (those of the App's
    namespace, on the client's cursor; its tasks' queue policies are applied first, as a worker
    does at start). ``queue``: one queue or several (default: every queue with a handler).

    Each job is claimed with ``pull`` and run by the worker's own executor
    (:class:`~postkit.worker.job_executor.JobExecutor`), on this thread: a return acks it (with
    the returned value as its result, when that can be one), and an exception becomes a dead
    letter or a retry by the worker's own rule (:func:`postkit.worker.outcomes.settlement_of`);
    a payload Python cannot decode is failed. Every statement runs in the client's transaction,
    and every transaction the worker would begin is a savepoint of it: a transactional handler's
    (never its own ``transaction``, and never batched), which rolls back when it raises, and a
    workflow's transactional steps. An ``async def`` handler runs with ``asyncio.run`` (so drain
    cannot be called from a running event loop). Handler timeouts are not enforced.

    A retry's backoff, and a job pushed with a delay, are not waited for: when no job is ready,
    drain moves the queue's clock (the session's ``postkit_queue.clock_offset``) to the next
    scheduled job, and puts it back at the end. A handler that always fails ends in the
    dead-letter queue once its attempts are spent.

    Raises:
        DrainLimitError: ``max_jobs`` claims were made and jobs were still left.
        KeyError: ``queue`` names a queue without a handler.
        RuntimeError: an ``async def`` handler is to run and an event loop is running here.
    """
    if isinstance(app_or_handlers, App):
        handlers = app_or_handlers.handlers
        if app_or_handlers.namespace != client.namespace:
            client = QueueClient(client.cursor, app_or_handlers.namespace)
        app_or_handlers.apply_policies(client.cursor)
    else:
        handlers = app_or_handlers
    queues = list(handlers) if queue is None else [queue] if isinstance(queue, str) else list(queue)
    specs = {name: handlers[name] for name in queues}
    if any(spec.is_async for spec in specs.values()) and _in_event_loop():
        raise RuntimeError("drain runs async def handlers with asyncio.run: call it outside a loop")
    cursor = client.cursor
    cursor.execute("SELECT current_setting('postkit_queue.clock_offset', true)")
    (clock_offset,) = cursor.fetchone()
    drained: dict[int, DrainedJob] = {}
    executor = _executor(client, specs, drained)
    claims = 0
    try:
        while True:
            ready = [job for name in specs if (job := client.pull(name)) is not None]
            if not ready:
                if not _move_clock_to_next(client, queues):
                    return drained
                continue
            for job in ready:
                claims += 1
                if claims > max_jobs:
                    raise DrainLimitError(
                        f"drain claimed {max_jobs} jobs and the queues are still not empty",
                        drained,
                    )
                record = drained.setdefault(job.id, DrainedJob(job.id, job.queue, job.payload))
                record.attempts += 1
                executor.run_here(job)
    finally:
        cursor.execute(
            "SELECT set_config('postkit_queue.clock_offset', %s, false)", (clock_offset or "",)
        )


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _CallersTransaction:
    """The worker's connections (:class:`~postkit.worker.pool.Connections`) as drain has them:
    every statement on the caller's cursor, and every transaction a savepoint of the caller's
    transaction (psycopg's ``transaction()`` in a transaction in progress)."""

    def __init__(self, client: QueueClient) -> None:
        self._client = client

    def run(self, action: Callable[[QueueClient], T]) -> T:
        return action(self._client)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        yield self._client.cursor.connection

    def client_on(self, connection: psycopg.Connection[Any]) -> QueueClient:
        return QueueClient(connection.cursor(), self._client.namespace)

    def resize(self, change: int) -> None:
        """One connection serves every handler: there is no pool to resize."""


_DRAINED_STATES = {
    Outcome.COMPLETED: "completed",
    Outcome.RETRIED: "running",
    Outcome.DEAD_LETTERED: "dead",
    Outcome.STALE: "stale",
}


class _DrainLog(OutcomeLog):
    """The worker's outcome log, written into each job's :class:`DrainedJob` instead."""

    def __init__(self, drained: dict[int, DrainedJob]) -> None:
        super().__init__(WorkerStats(), NO_METRICS)
        self._drained = drained

    def record(self, job: Job, outcome: Outcome, started: float, error: str | None = None) -> None:
        record = self._drained[job.id]
        if error is not None:
            record.errors.append(error)
        if outcome is Outcome.RETRIED:
            record.retries += 1
        record.state = _DRAINED_STATES[outcome]

    def record_acks(self, acks: list[tuple[Job, float]], acked: set[int]) -> None:
        for job, _ in acks:
            self._drained[job.id].state = "completed" if job.id in acked else "stale"


def _executor(
    client: QueueClient, specs: dict[str, HandlerSpec], drained: dict[int, DrainedJob]
) -> JobExecutor:
    """The worker's executor for ``specs`` on the caller's transaction: each handler's return
    value kept in its job's :class:`DrainedJob`, and each transactional handler in a savepoint
    of its own (not in its ``transaction``, nor batched with others)."""

    def kept(spec: HandlerSpec) -> HandlerSpec:
        function = spec.function
        if spec.is_async:

            async def run_async(job: Job, *more: Any) -> Any:
                drained[job.id].result = value = await function(job, *more)
                return value

            return dataclasses.replace(spec, function=run_async)

        def run(job: Job, *more: Any) -> Any:
            drained[job.id].result = value = function(job, *more)
            return value

        return dataclasses.replace(spec, function=run, transaction=None, batch=1)

    executor = JobExecutor(
        {queue: kept(spec) for queue, spec in specs.items()},
        Claims(NO_METRICS.handler_ended),
        _DrainLog(drained),
        namespace=client.namespace,
        concurrency=1,
        handler_timeout=None,
        cancel_grace=0.0,
        closed=threading.Event(),
    )
    executor.bind(_CallersTransaction(client))
    return executor


def _move_clock_to_next(client: QueueClient, queues: list[str]) -> bool:
    """Move the session's queue clock just past the earliest run_at of the scheduled jobs of
    ``queues``; False when none is scheduled."""
    upcoming = [
        job.run_at
        for name in queues
        for job in client.jobs(name, "scheduled", limit=1000)
        if job.run_at is not None
    ]
    if not upcoming:
        return False
    seconds = (min(upcoming) - client.clock()).total_seconds() + 0.001
    client.cursor.execute(
        "SELECT set_config('postkit_queue.clock_offset', (coalesce(nullif(current_setting("
        "'postkit_queue.clock_offset', true), '')::interval, interval '0') + make_interval("
        "secs => %s))::text, false)",
        (max(seconds, 0.001),),
    )
    return True


def pushed_jobs(client: QueueClient, queue: str, *, state: str = "pending") -> list[Job]:
    """Every job of ``queue`` in ``state`` ('pending' and 'scheduled' by default: queued, not
    yet claimed), in the client's namespace, read with ``QueueClient.jobs`` page by page."""
    states = ("pending", "scheduled") if state == "pending" else (state,)
    found: list[Job] = []
    for each in states:
        page = client.jobs(queue, each, limit=1000)
        while page:
            found.extend(page)
            page = client.jobs(queue, each, limit=1000, after=page[-1])
    return found


_ANY = object()


def assert_pushed(
    client: QueueClient, queue: str, payload: Any = _ANY, *, count: int | None = None
) -> list[Job]:
    """Assert that ``queue`` holds queued jobs (pending or scheduled): with exactly this
    ``payload`` if given, ``count`` of them if given (else at least one). Returns them.

    Raises:
        AssertionError: they are not there; the message lists what is.
    """
    queued = pushed_jobs(client, queue)
    matching = [job for job in queued if payload is _ANY or job.payload == payload]
    wanted = f"{count} job(s)" if count is not None else "a job"
    if (count is None and not matching) or (count is not None and len(matching) != count):
        what = "" if payload is _ANY else f" with payload {payload!r}"
        shown = [job.payload for job in queued[:20]]
        raise AssertionError(
            f"expected {wanted} in queue {queue!r}{what}, found {len(matching)}; "
            f"queued payloads: {shown}"
        )
    return matching


# ---------------------------------------------------------------------------------------------
# The plugin: an option and fixtures, nothing autouse.
# ---------------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("postkit").addoption(
        "--postkit-dsn",
        default=None,
        help=f"the PostgreSQL server for postkit's fixtures (default: ${DSN_VARIABLE}, else an "
        "embedded server); its role must be able to create databases",
    )


@pytest.fixture(scope="session")
def postkit_server_dsn(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server's DSN: ``--postkit-dsn``, ``POSTKIT_TEST_DSN``, else an embedded server
    started for this session in a temporary directory and deleted after it."""
    named = request.config.getoption("--postkit-dsn") or os.environ.get(DSN_VARIABLE)
    if named:
        yield named
        return
    directory = Path(tempfile.mkdtemp(prefix="postkit-testing-"))
    server = EmbeddedServer(directory / "pgdata", stop_at_exit=False)
    try:
        yield server.start()
    finally:
        with contextlib.suppress(Exception):
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)


def _admin(server_dsn: str, statement: sql.Composed) -> None:
    with psycopg.connect(server_dsn, autocommit=True) as admin:
        admin.execute(statement)


class _Databases:
    """Copies of the template, one made ahead: while a test runs, a thread creates the next
    test's database, and another drops the databases of tests that ended, so a test waits for
    neither (a DROP DATABASE costs more than the copy)."""

    def __init__(self, server_dsn: str, template: str) -> None:
        self.server_dsn = server_dsn
        self.template = template
        self._creating = ThreadPoolExecutor(1, thread_name_prefix="postkit-create-database")
        self._dropping = ThreadPoolExecutor(1, thread_name_prefix="postkit-drop-database")
        self._next: Future[str] | None = None
        self._drops: list[Future[None]] = []

    def _create(self) -> str:
        name = f"postkit_test_{uuid.uuid4().hex[:12]}"
        _admin(
            self.server_dsn,
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(self.template)
            ),
        )
        return name

    def _drop(self, name: str) -> None:
        statement = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
        _admin(self.server_dsn, statement.format(sql.Identifier(name)))

    def take(self) -> str:
        """A new database's name; the next one starts being made."""
        made = self._next or self._creating.submit(self._create)
        self._next = self._creating.submit(self._create)
        return made.result()

    def drop(self, name: str) -> None:
        """Drop ``name`` in the background."""
        self._drops.append(self._dropping.submit(self._drop, name))

    def close(self) -> None:
        """Drop the database made ahead and wait for every drop; raise the first drop's
        error, if one failed."""
        if self._next is not None:
            with contextlib.suppress(Exception):
                self.drop(self._next.result())
        self._creating.shutdown()
        self._dropping.shutdown()
        for dropped in self._drops:
            dropped.result()


@pytest.fixture(scope="session")
def postkit_template(postkit_server_dsn: str) -> Iterator[str]:
    """The name of this session's template database: the queue schema, installed once."""
    name = f"postkit_template_{uuid.uuid4().hex[:12]}"
    _admin(postkit_server_dsn, sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        with psycopg.connect(psycopg.conninfo.make_conninfo(postkit_server_dsn, dbname=name)) as c:
            install(c)
        yield name
    finally:
        _admin(
            postkit_server_dsn,
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)),
        )


@pytest.fixture(scope="session")
def _postkit_databases(postkit_server_dsn: str, postkit_template: str) -> Iterator[_Databases]:
    databases = _Databases(postkit_server_dsn, postkit_template)
    try:
        yield databases
    finally:
        databases.close()


@pytest.fixture
def postkit_database(_postkit_databases: _Databases) -> Iterator[str]:
    """The DSN of a database of this test's own, with the queue schema installed (a copy of
    the session's template, made while the previous test ran); dropped after the test, with
    any connections left open, in the background (all are dropped by the session's end)."""
    name = _postkit_databases.take()
    try:
        yield psycopg.conninfo.make_conninfo(_postkit_databases.server_dsn, dbname=name)
    finally:
        _postkit_databases.drop(name)


@pytest.fixture
def postkit_namespace() -> str:
    """The namespace of ``postkit_client``: "default". Override this fixture to change it."""
    return "default"


@pytest.fixture
def postkit_connection(postkit_database: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection to ``postkit_database`` (not autocommit), closed after the test."""
    with psycopg.connect(postkit_database) as connection:
        yield connection


@pytest.fixture
def postkit_client(
    postkit_connection: psycopg.Connection[Any], postkit_namespace: str
) -> QueueClient:
    """A ``QueueClient`` on ``postkit_connection``, in ``postkit_namespace``."""
    return QueueClient(postkit_connection.cursor(), namespace=postkit_namespace)


__all__: list[str] = [
    "DSN_VARIABLE",
    "DrainLimitError",
    "DrainedJob",
    "assert_pushed",
    "drain",
    "pushed_jobs",
]
