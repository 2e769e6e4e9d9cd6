"""The maintenance services and their runner, as ``postkit tick`` and the worker run them:
one round on demand (``run_once``) and rounds until a stop (``run_forever``)."""

from __future__ import annotations

import dataclasses
import queue as stdlib_queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient
from postkit.worker.backoff import Backoff
from postkit.worker.maintenance import Maintenance, RoundReport
from tests.signals import wait_until

Q = "chores"


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


def expired_claim(client: QueueClient, shift_clock: Callable[[QueueClient, float], None]) -> int:
    """A job pushed and claimed by a session whose clock runs a minute behind: its 30 s claim
    has already run out by every other session's clock."""
    shift_clock(client, -60)
    job_id = client.push(Q, {})
    assert job_id is not None
    assert client.pull(Q, worker_id="gone", visibility_timeout=30) is not None
    shift_clock(client, 0)
    return job_id


def due_schedule(client: QueueClient, name: str, every: float = 3600) -> None:
    client.create_schedule(name, Q, {"from": name}, every=every)
    client.cursor.execute(
        "UPDATE postkit_queue.schedules SET next_run_at = now() - interval '1 second'"
        " WHERE namespace = %s AND name = %s",
        (client.namespace, name),
    )


@pytest.fixture
def rounds() -> Iterator[Callable[[Maintenance], stdlib_queue.SimpleQueue[RoundReport]]]:
    """Run a Maintenance's rounds on a thread until the test ends; each round that did
    anything arrives in the queue returned."""
    started: list[tuple[threading.Event, threading.Thread]] = []

    def _start(maintenance: Maintenance) -> stdlib_queue.SimpleQueue[RoundReport]:
        reports: stdlib_queue.SimpleQueue[RoundReport] = stdlib_queue.SimpleQueue()
        stop = threading.Event()
        thread = threading.Thread(
            target=maintenance.run_forever, args=(stop, reports.put), daemon=True
        )
        thread.start()
        started.append((stop, thread))
        return reports

    yield _start
    for stop, thread in started:
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive(), "run_forever did not return once stopped"


def test_one_round_rescues_fires_and_prunes_and_says_so(
    dsn: str,
    client: QueueClient,
    namespace: str,
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    maintenance = Maintenance.for_tick(dsn, namespace, interval=5)
    idle = maintenance.run_once()
    assert not idle.anything
    assert (idle.rescued, idle.fired, idle.broken) == (0, [], [])

    job_id = expired_claim(client, shift_clock)
    due_schedule(client, "beat")

    done = maintenance.run_once()

    assert done.anything
    assert done.rescued == 1
    [fired] = done.fired
    assert fired.name == "beat"
    job = client.get_job(job_id)
    assert job is not None and job.state == "pending"
    # The figures `postkit tick --json` prints, field for field.
    assert [field.name for field in dataclasses.fields(done)] == [
        "at",
        "rescued",
        "fired",
        "broken",
        "pruned",
    ]


def test_rounds_wake_for_each_due_schedule_whatever_the_interval(
    dsn: str, client: QueueClient, namespace: str, rounds: Any
) -> None:
    client.create_schedule("beat", Q, {}, every=1)
    reports = rounds(Maintenance.for_tick(dsn, namespace, interval=60))

    fired = [reports.get(timeout=10).fired for _ in range(3)]

    assert [[run.name for run in runs] for runs in fired] == [["beat"]] * 3


def test_rounds_rescue_a_claim_that_expires_while_they_run(
    dsn: str,
    client: QueueClient,
    namespace: str,
    shift_clock: Callable[[QueueClient, float], None],
    rounds: Any,
) -> None:
    reports = rounds(Maintenance.for_tick(dsn, namespace, interval=0.1))
    job_id = expired_claim(client, shift_clock)

    assert reports.get(timeout=10).rescued == 1
    job = client.get_job(job_id)
    assert job is not None and job.state == "pending"


def test_rounds_survive_a_lost_connection_and_say_so(
    dsn: str,
    client: QueueClient,
    namespace: str,
    connect: Callable[..., psycopg.Connection[Any]],
    shift_clock: Callable[[QueueClient, float], None],
) -> None:
    application = f"pk-maintenance-{namespace}"
    maintenance = Maintenance.for_tick(
        psycopg.conninfo.make_conninfo(dsn, application_name=application),
        namespace,
        interval=0.1,
    )
    reports: stdlib_queue.SimpleQueue[RoundReport] = stdlib_queue.SimpleQueue()
    errors: stdlib_queue.SimpleQueue[tuple[psycopg.Error, float]] = stdlib_queue.SimpleQueue()
    stop = threading.Event()
    thread = threading.Thread(
        target=maintenance.run_forever,
        args=(stop, reports.put),
        kwargs={"on_error": lambda error, delay: errors.put((error, delay))},
        daemon=True,
    )
    thread.start()
    admin = connect(autocommit=True)
    try:
        wait_until(
            lambda: admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = %s",
                (application,),
            ).fetchone()[0],
            "the runner to connect (and its connection to be cut)",
            10,
        )
        error, delay = errors.get(timeout=10)
        assert isinstance(error, psycopg.OperationalError)
        assert 0.1 <= delay <= 0.2, "the first retry waits 2 intervals, jittered down to half"

        job_id = expired_claim(client, shift_clock)

        assert reports.get(timeout=10).rescued == 1, "the runner never came back"
        job = client.get_job(job_id)
        assert job is not None and job.state == "pending"
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()


def test_a_backoff_doubles_from_its_base_to_its_cap_and_starts_over_after_a_success() -> None:
    backoff = Backoff(base=0.2, cap=1.0)

    assert [backoff.failure() for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.failure() == 0.2
    assert Backoff(base=1.0, cap=60.0).delay(10_000) == 60.0


def test_a_jittered_backoff_waits_between_half_and_all_of_its_delay() -> None:
    backoff = Backoff(base=4.0, cap=4.0, jitter=0.5)

    waits = [backoff.failure() for _ in range(200)]

    assert all(2.0 <= wait <= 4.0 for wait in waits)
    assert len(set(waits)) > 1
