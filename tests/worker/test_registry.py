"""Workers are visible: a running worker and a running `postkit tick` are in the registry, a
clean stop takes them out, a killed one stays and reads as lost, and `postkit workers` shows
them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient, WorkerInfo
from postkit.worker import Handlers, Worker
from postkit.worker.backoff import Backoff
from postkit.worker.maintenance import Maintenance, Registry, RoundReport, Service
from tests.signals import wait_for, wait_until


@pytest.fixture
def reader(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client that reads the registry as an operator would."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


def registered(reader: QueueClient, kind: str) -> Callable[[], list[WorkerInfo]]:
    return lambda: [worker for worker in reader.workers() if worker.kind == kind]


@pytest.fixture
def running_worker(dsn: str, namespace: str) -> Iterator[Worker]:
    handlers = Handlers({"emails": lambda job: None, "sms": lambda job: None})
    worker = Worker(
        dsn, handlers, namespace=namespace, worker_id="w-registry", concurrency=3, poll_interval=30
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    yield worker
    worker.stop()
    thread.join(30)
    assert not thread.is_alive()


def test_a_running_worker_is_registered_and_a_clean_stop_takes_it_out(
    running_worker: Worker, reader: QueueClient
) -> None:
    [me] = wait_until(registered(reader, "worker"), "the worker to register")
    assert (me.worker_id, me.queues, me.concurrency, me.pid) == (
        "w-registry",
        ["emails", "sms"],
        3,
        os.getpid(),
    )
    assert me.lost is False

    running_worker.stop()

    wait_until(lambda: not registered(reader, "worker")(), "the stopped worker to deregister")


def test_a_killed_worker_stays_registered_and_reads_as_lost(
    dsn: str, namespace: str, tmp_path: Path, reader: QueueClient
) -> None:
    (tmp_path / "tasks.py").write_text(
        textwrap.dedent(
            """
            from postkit.worker import Handlers
            handlers = Handlers({"emails": lambda job: None})
            """
        )
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "postkit.cli", "worker", "tasks", "--namespace", namespace],
        cwd=tmp_path,
        env={**os.environ, "POSTKIT_DSN": dsn, "PYTHONPATH": os.pathsep.join(sys.path)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        [killed] = wait_until(registered(reader, "worker"), "the worker process to register")
        assert killed.pid == process.pid
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    # Its row stays; three heartbeat intervals on, it reads as lost.
    reader.cursor.execute(
        "SELECT set_config('postkit_queue.clock_offset', %s, false)",
        (f"{3 * killed.heartbeat_interval + 1} seconds",),
    )
    assert [(worker.pid, worker.lost) for worker in reader.workers()] == [(process.pid, True)]


def test_a_running_ticker_is_registered_until_sigterm(
    dsn: str, namespace: str, reader: QueueClient
) -> None:
    ticker = subprocess.Popen(
        [sys.executable, "-m", "postkit.cli", "tick", "--dsn", dsn, "--namespace", namespace],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        [tick] = wait_until(registered(reader, "ticker"), "the ticker to register")
        assert (tick.pid, tick.queues, tick.concurrency) == (ticker.pid, [], 0)
    finally:
        ticker.send_signal(signal.SIGTERM)
        assert ticker.wait(10) == 0
    assert registered(reader, "ticker")() == []


def test_postkit_workers_shows_each_worker_and_whether_it_is_lost(
    running_worker: Worker, reader: QueueClient, dsn: str, namespace: str
) -> None:
    wait_until(registered(reader, "worker"), "the worker to register")
    options = ["--dsn", dsn, "--namespace", namespace]

    table = CliRunner().invoke(main, ["workers", *options])
    as_json = CliRunner().invoke(main, ["workers", "--json", *options])

    assert table.exit_code == 0, table.output
    assert "w-registry" in table.output and "emails, sms" in table.output
    assert "alive" in table.output
    [row] = json.loads(as_json.output)
    assert (row["worker_id"], row["kind"], row["lost"]) == ("w-registry", "worker", False)


def test_postkit_workers_says_when_none_is_registered(dsn: str, namespace: str) -> None:
    result = CliRunner().invoke(main, ["workers", "--dsn", dsn, "--namespace", namespace])

    assert result.exit_code == 0
    assert result.output == f"No workers registered in namespace {namespace!r}.\n"


@pytest.mark.parametrize(("interval", "heartbeat"), [(2 * 86400, 86400.0), (1e-7, 1e-6)])
def test_a_ticker_registers_whatever_its_interval_heartbeating_within_the_registry_s_range(
    dsn: str, namespace: str, reader: QueueClient, interval: float, heartbeat: float
) -> None:
    maintenance = Maintenance.for_tick(dsn, namespace, interval=interval)
    [registry] = [service for service in maintenance.services if isinstance(service, Registry)]
    with psycopg.connect(dsn, autocommit=True) as connection:
        client = QueueClient(connection.cursor(), namespace=namespace)

        assert registry.run(connection, client, RoundReport()) <= 86400
    [tick] = registered(reader, "ticker")()
    assert tick.heartbeat_interval == heartbeat


class _Broken(Service):
    def run(self, connection: Any, client: QueueClient, report: RoundReport, **_: Any) -> float:
        raise psycopg.errors.LockNotAvailable("a step fails")


def test_a_single_round_leaves_no_registration_behind_even_when_a_step_fails(
    dsn: str, namespace: str, reader: QueueClient
) -> None:
    registry = Registry("tick-once", kind="ticker", queues=[], concurrency=0, interval=5)
    maintenance = Maintenance(
        dsn, namespace, [registry, _Broken(interval=5)], backoff=Backoff(base=1, cap=1)
    )

    with pytest.raises(psycopg.errors.LockNotAvailable):
        maintenance.run_once()
    assert reader.workers() == []


def test_a_stop_held_by_a_lock_gives_up_deregistering_within_seconds(
    dsn: str, namespace: str, reader: QueueClient, conn: psycopg.Connection[Any]
) -> None:
    maintenance = Maintenance.for_tick(dsn, namespace, interval=60)
    stop = threading.Event()
    thread = threading.Thread(target=maintenance.run_forever, args=(stop,), daemon=True)
    thread.start()
    wait_until(registered(reader, "ticker"), "the ticker to register")

    # An upgrade's lock, or a PgBouncer whose server is gone: the statement waits, unbounded.
    conn.execute("LOCK TABLE postkit_queue.workers IN ACCESS EXCLUSIVE MODE")
    stop.set()
    thread.join(20)
    alive = thread.is_alive()
    conn.rollback()
    assert not alive, "the stop waited on the lock"


def test_a_stop_while_a_round_waits_on_a_lock_ends_the_runner_within_seconds(
    dsn: str, namespace: str, conn: psycopg.Connection[Any]
) -> None:
    # The lock first: the first round's registration waits on it, unbounded, and only the
    # stop (which cancels the statement) can end it.
    conn.execute("LOCK TABLE postkit_queue.workers IN ACCESS EXCLUSIVE MODE")
    (holder,) = conn.execute("SELECT pg_backend_pid()").fetchone() or (0,)
    maintenance = Maintenance.for_tick(dsn, namespace, interval=60)
    stop = threading.Event()
    thread = threading.Thread(target=maintenance.run_forever, args=(stop,), daemon=True)
    thread.start()
    with psycopg.connect(dsn, autocommit=True) as watcher:
        wait_until(
            lambda: (
                watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY (pg_blocking_pids(pid))",
                    (holder,),
                ).fetchone()
                == (1,)
            ),
            "the round to wait on the lock",
        )
    stop.set()
    thread.join(20)
    alive = thread.is_alive()
    conn.rollback()
    assert not alive, "the stop waited on the round's statement"


def test_postkit_workers_shortens_a_long_list_of_queues_in_the_table_not_in_json(
    reader: QueueClient, dsn: str, namespace: str
) -> None:
    queues = [f"queue-{number}" for number in range(1000)]
    reader.register_worker(
        "many",
        kind="worker",
        host="h",
        pid=1,
        queues=queues,
        concurrency=1,
        version="v",
        heartbeat_interval=5,
    )
    options = ["--dsn", dsn, "--namespace", namespace]

    table = CliRunner().invoke(main, ["workers", *options])
    as_json = CliRunner().invoke(main, ["workers", "--json", *options])

    assert table.exit_code == 0, table.output
    [_, row] = table.output.splitlines()
    assert "queue-0, queue-1" in row and "(1000 queues)" in row
    assert len(row) < 300
    assert json.loads(as_json.output)[0]["queues"] == queues


def test_a_worker_whose_row_goes_while_it_runs_registers_again(
    dsn: str, namespace: str, reader: QueueClient
) -> None:
    worker = Worker(
        dsn,
        Handlers({"emails": lambda job: None}),
        namespace=namespace,
        worker_id="w-pruned",
        poll_interval=30,
        tick_interval=0.2,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        [first] = wait_until(registered(reader, "worker"), "the worker to register")
        assert reader.deregister_worker("w-pruned") is True  # as a prune would

        [again] = wait_until(registered(reader, "worker"), "the worker to register again")
        assert (again.worker_id, again.pid) == ("w-pruned", first.pid)
    finally:
        worker.stop()
        thread.join(30)


def test_a_stopping_worker_stays_registered_while_a_handler_still_runs(
    dsn: str, namespace: str, reader: QueueClient
) -> None:
    started, finish = threading.Event(), threading.Event()

    def slow(job: Any) -> None:
        started.set()
        finish.wait(30)

    worker = Worker(
        dsn,
        Handlers({"emails": slow}),
        namespace=namespace,
        worker_id="w-draining",
        poll_interval=30,
        grace_period=0.1,
    )
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        wait_until(registered(reader, "worker"), "the worker to register")
        reader.push("emails", {})
        wait_for(started, "the handler to start")

        worker.stop()
        time.sleep(0.5)  # the grace period (0.1 s) passing is the point
        # The job still runs, under the worker's claim: the worker is still there to see.
        assert thread.is_alive()
        assert [w.worker_id for w in registered(reader, "worker")()] == ["w-draining"]
    finally:
        finish.set()
        thread.join(30)
    assert not thread.is_alive()
    assert registered(reader, "worker")() == []
