"""A worker SIGKILLed at each point of a workflow run: inside a transactional step before its
commit, after it, inside an at-least-once step, and while the run is parked. Another worker
takes the run over once its claim expires: the run completes, each transactional step's row
is in the database exactly once, and the at-least-once step ran again only if the kill came
before its result was recorded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient, install
from tests.signals import wait_until

NAMESPACE = "workflow-kills"
SCRIPT = Path(__file__).with_name("kill_point_worker.py")


class Workers:
    """Worker processes of kill_point_worker.py, each killed at the test's end."""

    def __init__(self, dsn: str, directory: Path) -> None:
        self.dsn = dsn
        self.directory = directory
        self.marker = directory / "reached"
        self.calls = directory / "calls"
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, kill_at: str) -> subprocess.Popen[bytes]:
        name = f"w{len(self.processes)}"
        env = {
            **os.environ,
            "CHAOS_DSN": self.dsn,
            "CHAOS_NAMESPACE": NAMESPACE,
            "CHAOS_WORKER_ID": name,
            "CHAOS_KILL_AT": kill_at,
            "CHAOS_MARKER": str(self.marker),
            "CHAOS_CALLS": str(self.calls),
        }
        with open(self.directory / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                [sys.executable, str(SCRIPT)], env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@pytest.fixture
def workers(fresh_database: str, tmp_path: Path) -> Iterator[Workers]:
    with psycopg.connect(fresh_database) as connection:
        install(connection)
        connection.execute("CREATE TABLE kill_effects (run_id bigint, step text)")
    running = Workers(fresh_database, tmp_path)
    yield running
    running.stop()


def client(dsn: str) -> QueueClient:
    return QueueClient(psycopg.connect(dsn, autocommit=True).cursor(), namespace=NAMESPACE)


def effects(queue: QueueClient, run_id: int) -> list[Any]:
    queue.cursor.execute("SELECT step FROM kill_effects WHERE run_id = %s ORDER BY step", (run_id,))
    return [row[0] for row in queue.cursor.fetchall()]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kill_at", "provider_calls"),
    [
        ("inside the transaction", 1),
        ("after the transaction", 1),
        ("inside the step", 2),
        ("while parked", 1),
    ],
)
def test_a_run_killed_at_each_point_completes_with_each_effect_once(
    workers: Workers, kill_at: str, provider_calls: int
) -> None:
    queue = client(workers.dsn)
    run_id = queue.push("orders", {"args": [], "kwargs": {}})
    assert run_id is not None

    first = workers.start("" if kill_at == "while parked" else kill_at)
    if kill_at == "while parked":
        wait_until(
            lambda: [s.name for s in queue.workflow_steps(run_id)][-1:] == ["sleep"],
            "the run to park",
        )
    else:
        wait_until(workers.marker.exists, f"the run to reach the point {kill_at!r}")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    workers.start("")  # takes the run over once its claim expires (or it wakes)

    wait_until(lambda: queue.result(run_id).state == "completed", "the run to complete", 60)
    assert effects(queue, run_id) == ["first", "second"]
    assert workers.calls.read_text().split() == [str(run_id)] * provider_calls
    assert [step.name for step in queue.workflow_steps(run_id)] == [
        "first",
        "provider",
        "sleep",
        "second",
    ]
