"""`postkit worker --shared-namespace`: one worker for several namespaces, sharing its slots
(postkit.worker.SharedWorker), in real processes against the test server."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner

from postkit.cli import main
from postkit.queue import QueueClient
from tests.cli.test_cli_worker import RUNS_TABLE, TASKS, WorkerProcess
from tests.scrape import free_ports, scrape, value
from tests.signals import wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
def tasks_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The handler module in a directory of its own, the current one. The commands run in
    this process import it as ``tasks``: it leaves sys.modules and sys.path afterwards, so that
    another test's ``tasks`` module is its own."""
    (tmp_path / "tasks.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield tmp_path
    sys.modules.pop("tasks", None)


@pytest.fixture
def namespaces(namespace: str) -> tuple[str, str]:
    return f"{namespace}-a", f"{namespace}-b"


@pytest.fixture
def ran(connect: Callable[..., psycopg.Connection[Any]]) -> Callable[[str], int]:
    """How many `emails` jobs of a namespace the handler ran."""
    connection = connect(autocommit=True)
    connection.execute(
        f"CREATE TABLE IF NOT EXISTS {RUNS_TABLE} "
        "(namespace text, job_id bigint, worker_id text, pid integer)"
    )

    def _ran(namespace: str) -> int:
        row = connection.execute(
            f"SELECT count(*) FROM {RUNS_TABLE} WHERE namespace = %s", (namespace,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    return _ran


@pytest.fixture
def started(tasks_dir: Path) -> Iterator[list[WorkerProcess]]:
    processes: list[WorkerProcess] = []
    yield processes
    for process in processes:
        process.close()


def test_one_worker_of_two_processes_runs_the_jobs_of_every_shared_namespace(
    tasks_dir: Path,
    dsn: str,
    namespaces: tuple[str, str],
    connect: Callable[..., psycopg.Connection[Any]],
    ran: Callable[[str], int],
    started: list[WorkerProcess],
) -> None:
    heavy, light = namespaces
    for namespace in namespaces:
        client = QueueClient(connect(autocommit=True).cursor(), namespace=namespace)
        client.push_batch("emails", [{} for _ in range(10)])

    worker = WorkerProcess(
        [
            *("tasks", "--dsn", dsn, "--processes", "2", "--poll-interval", "0.5"),
            *("--shared-namespace", f"{heavy}=3", "--shared-namespace", light),
        ],
        cwd=tasks_dir,
        log_path=tasks_dir / "worker.log",
    )
    started.append(worker)
    wait_until(lambda: ran(heavy) == 10 and ran(light) == 10, "both namespaces' jobs to run")

    assert worker.terminate() == 0, worker.output()
    assert f"namespaces '{heavy}' (weight 3), '{light}' (weight 1)" in worker.output()


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        (["--shared-namespace", "a", "--namespace", "b"], "cannot go with --namespace"),
        (["--shared-namespace", "a", "--shared-namespace", "a=2"], "'a' given more than once"),
        (["--shared-namespace", "a", "--prefetch", "4"], "a shared worker holds no prefetch"),
        (["--shared-namespace", "a=0"], "'a''s weight must be from 1 to 1000, got 0"),
        (["--shared-namespace", "a=1001"], "'a''s weight must be from 1 to 1000, got 1001"),
        (["--shared-namespace", "a=-1"], "'a''s weight (after the last '=') must be a whole"),
        (["--shared-namespace", "a= 3"], "must be a whole number from 1 to 1000, got ' 3'"),
        (["--shared-namespace", "a="], "must be a whole number from 1 to 1000, got ''"),
        (["--shared-namespace", "a=b"], "a namespace with '=' in its name takes a weight: 'a=b=1'"),
        (["--shared-namespace", "x" * 129], "the namespace is 129 characters long"),
    ],
    ids=[
        "with-namespace",
        "twice",
        "with-prefetch",
        "weight-0",
        "weight-1001",
        "weight-negative",
        "weight-spaced",
        "weight-empty",
        "weight-not-a-number",
        "long-name",
    ],
)
def test_a_shared_namespace_that_cannot_be_is_refused_before_the_worker_starts(
    tasks_dir: Path, arguments: list[str], error: str
) -> None:
    result = CliRunner().invoke(
        main, ["worker", "tasks", "--dsn", "postgresql://nowhere.invalid/db", *arguments]
    )

    assert result.exit_code == 2, result.output
    assert error in " ".join(result.output.split()), result.output


def test_sigterm_stops_every_namespace_gracefully_in_one_process_serving_one_endpoint(
    tasks_dir: Path,
    dsn: str,
    namespaces: tuple[str, str],
    connect: Callable[..., psycopg.Connection[Any]],
    ran: Callable[[str], int],
    started: list[WorkerProcess],
) -> None:
    slow, quick = namespaces
    QueueClient(connect(autocommit=True).cursor(), namespace=slow).push("emails", {"sleep": 1})
    port = free_ports()
    worker = WorkerProcess(
        [
            *("tasks", "--dsn", dsn, "--poll-interval", "0.5", "--metrics-port", str(port)),
            *("--shared-namespace", slow, "--shared-namespace", quick),
        ],
        cwd=tasks_dir,
        log_path=tasks_dir / "worker.log",
    )
    started.append(worker)
    wait_until(
        lambda: "worker started" in worker.output() and _running(connect, slow),
        "the slow job to be claimed",
    )
    samples = wait_until(
        lambda: (
            (found := scrape(f"http://127.0.0.1:{port}/metrics"))
            and value(found, "postkit_jobs_running", namespace=slow, queue="emails") == 1
            and found
        ),
        "the endpoint to show the slow job running",
    )
    assert value(samples, "postkit_jobs_running", namespace=quick, queue="emails") == 0

    worker.process.send_signal(signal.SIGTERM)

    # The slow job, running when the signal came, finishes within the grace period.
    assert worker.wait() == 0, worker.output()
    assert ran(slow) == 1


def _running(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> bool:
    with connect(autocommit=True) as connection:
        row = connection.execute(
            "SELECT count(*) FROM postkit_queue.jobs WHERE namespace = %s AND state = 'running'",
            (namespace,),
        ).fetchone()
    return row is not None and row[0] == 1
