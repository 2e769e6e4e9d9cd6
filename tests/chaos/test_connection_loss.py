"""A worker whose connections are cut (a server restart, a proxy restart, pg_terminate_backend),
in slow motion: the chaos run (test_chaos.py) found these two, and here each is made to happen
every time.

Each test has a server of its own (``own_server``) and cuts only its own worker's connections.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from postkit.embedded import EmbeddedServer
from postkit.queue import Job, QueueClient, install
from postkit.worker import Handlers, Worker
from tests.signals import wait_for, wait_until

Q = "work"


class Setup:
    """A server of the test's own with the schema, an autocommit client, and workers on threads
    whose connections carry an application_name of their own."""

    def __init__(self, server: EmbeddedServer) -> None:
        self.dsn = server.dsn
        with psycopg.connect(self.dsn) as connection:
            install(connection)
        self.namespace = f"loss-{uuid.uuid4().hex[:8]}"
        self.application_name = f"pk-{self.namespace}"
        self.admin = psycopg.connect(self.dsn, autocommit=True)
        self.client = QueueClient(self.admin.cursor(), namespace=self.namespace)
        self.workers: list[tuple[Worker, threading.Thread]] = []

    def start_worker(self, handlers: Handlers, **options: Any) -> Worker:
        dsn = psycopg.conninfo.make_conninfo(self.dsn, application_name=self.application_name)
        worker = Worker(dsn, handlers, namespace=self.namespace, tick_interval=60.0, **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        self.workers.append((worker, thread))
        return worker

    def state(self, job_id: int | None) -> str | None:
        """The job's state; None once it is acked (or if it was never pushed)."""
        job = None if job_id is None else self.client.get_job(job_id)
        return None if job is None else job.state

    def cut(self, *, idle_only: bool) -> int:
        """Terminate the worker's connections (only the idle ones, if ``idle_only``)."""
        row = self.admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = %s AND (state = 'idle' OR NOT %s)",
            (self.application_name, idle_only),
        ).fetchone()
        assert row is not None
        return int(row[0])

    def all_idle(self) -> bool:
        """Whether the worker has at least eight connections and every one is idle."""
        row = self.admin.execute(
            "SELECT count(*) FILTER (WHERE state = 'idle') >= 8 AND bool_and(state = 'idle')"
            " FROM pg_stat_activity WHERE application_name = %s",
            (self.application_name,),
        ).fetchone()
        return row is not None and row[0] is True

    def close(self) -> None:
        for worker, _ in self.workers:
            worker.stop()
        for _, thread in self.workers:
            thread.join(timeout=30)
        self.admin.close()


@pytest.fixture
def setup(own_server: EmbeddedServer) -> Iterator[Setup]:
    state = Setup(own_server)
    yield state
    state.close()


@pytest.mark.slow
def test_a_job_is_not_charged_for_a_connection_the_worker_lost(setup: Setup) -> None:
    started, go = threading.Event(), threading.Event()
    ran: list[str] = []
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def handle(job: Job, cursor: Any) -> None:
        ran.append(job.payload["name"])
        if job.payload["name"] == "A":
            started.set()
            go.wait(30)

    setup.start_worker(handlers, concurrency=1, prefetch=1, poll_interval=0.2)
    setup.client.push(Q, {"name": "A"})
    wait_for(started, "job A to start")
    b = setup.client.push(Q, {"name": "B"}, max_attempts=1)
    assert b is not None
    # B is claimed ahead (prefetch) and waits for the slot A holds.
    wait_until(lambda: setup.state(b) == "running", "job B to be claimed")
    # The worker's idle pooled connections die; the one A's handler is using lives.
    assert setup.cut(idle_only=True) >= 1
    go.set()

    def settled() -> tuple[Job | None] | None:
        found = setup.client.get_job(b)
        return (found,) if found is None or found.state != "running" else None

    (job,) = wait_until(settled, "job B to be settled")
    assert job is None or job.state == "pending", (
        f"job B ended {job.state} after attempt {job.attempts} of {job.max_attempts} with"
        f" {[entry['error'].splitlines()[0] for entry in job.errors]}; its handler ran: "
        f"{'B' in ran}"
    )
    wait_until(lambda: setup.client.get_job(b) is None, "job B to be acked")
    assert ran == ["A", "B"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_resumes_within_seconds_after_its_connections_are_cut(setup: Setup) -> None:
    ran: dict[int, float] = {}
    warming_up = threading.Barrier(8)
    handlers = Handlers()

    @handlers.register(Q, transactional=True)
    def handle(job: Job, cursor: Any) -> None:
        ran[job.id] = time.monotonic()
        if job.payload.get("warm"):
            warming_up.wait(15)  # eight at once: the pool grows to eight connections or more

    setup.start_worker(handlers, concurrency=8, prefetch=0, poll_interval=1.0)
    warm = [setup.client.push(Q, {"warm": True}) for _ in range(8)]
    wait_until(lambda: all(setup.state(j) is None for j in warm), "the warm-up to end")
    wait_until(setup.all_idle, "every connection of the worker to be back in the pool, idle")

    assert setup.cut(idle_only=False) >= 8
    cut_at = time.monotonic()
    job_id = setup.client.push(Q, {})
    assert job_id is not None
    wait_until(
        lambda: job_id in ran,
        "the worker to run a new job after its connections were cut (the server never went away)",
        cut_at + 15.0 - time.monotonic(),
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_worker_is_back_at_full_speed_within_a_second_of_a_database_restart(
    setup: Setup, own_server: EmbeddedServer
) -> None:
    """PostgreSQL goes away for 8 s under a steady producer and comes back: the worker must be
    completing jobs again, at the producer's pace, within about a second of the server
    accepting connections. Its fallback poll (30 s) is far longer than that, so only the
    listener, back on its notifications, can keep up."""
    completed: list[float] = []
    handlers = Handlers()

    @handlers.register(Q)
    def handle(job: Job) -> None:
        completed.append(time.monotonic())

    setup.start_worker(handlers, concurrency=4, poll_interval=30.0)
    stop_producing = threading.Event()

    def produce() -> None:
        """A job every 50 ms, reconnecting whenever the server is away."""
        connection: psycopg.Connection[Any] | None = None
        while not stop_producing.wait(0.05):
            try:
                if connection is None:
                    connection = psycopg.connect(setup.dsn, autocommit=True, connect_timeout=2)
                QueueClient(connection.cursor(), namespace=setup.namespace).push(Q, {})
            except psycopg.OperationalError:
                if connection is not None:
                    connection.close()
                connection = None
        if connection is not None:
            connection.close()

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_until(lambda: len(completed) >= 20, "the worker never got going")
        setup.admin.close()
        own_server.stop()
        time.sleep(8)  # the outage itself: long enough for every backoff to grow
        assert own_server.restart() == setup.dsn
        back_at = time.monotonic()
        time.sleep(6)  # the window the verdict is drawn from: what completed in these 6 s
    finally:
        stop_producing.set()
        producer.join(timeout=10)
        setup.admin = psycopg.connect(setup.dsn, autocommit=True)

    after = [at - back_at for at in completed if at > back_at]
    assert after, "no job completed in the 6 s after the server came back"
    first = after[0]
    gaps = [later - earlier for earlier, later in itertools.pairwise(after)]
    assert first < 3.0, f"the first job after the restart completed {first:.1f}s after it"
    assert max(gaps, default=0.0) < 3.0, (
        f"jobs completed {first:.1f}s after the restart, then stalled for {max(gaps):.1f}s"
        " (the worker fell back to its poll)"
    )
