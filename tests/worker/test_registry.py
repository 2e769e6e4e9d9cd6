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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient, WorkerInfo
from postkit.worker import Handlers, Worker
from tests.signals import wait_until


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
