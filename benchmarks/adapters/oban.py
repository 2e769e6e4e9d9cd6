"""Oban for Python: its ``insert_job.sql`` executed as ``Oban.enqueue`` executes it (one
statement per job, one transaction per batch as ``enqueue_many`` does), on the schema of its
``install.sql``; worker processes are Oban instances with one queue of ``limit`` slots, run by
the interpreter ``--oban-python`` names (Oban needs Python 3.12+), as
:mod:`benchmarks.adapters.oban_worker`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from benchmarks.adapters import Adapter, CommandWorkers, WorkerConfig, Workers

QUEUE = "bench"
WORKER = "benchmarks.adapters.oban_worker.Bench"
ROOT = Path(__file__).resolve().parent.parent.parent
PYTHON_VARIABLE = "BENCHMARK_OBAN_PYTHON"
"""Where ``--oban-python`` hands the interpreter to this adapter."""


def python() -> str:
    found = os.environ.get(PYTHON_VARIABLE)
    if not found:
        raise RuntimeError("Oban needs --oban-python PATH (a Python 3.12+ with oban installed)")
    return found


def in_python(interpreter: str, code: str) -> str:
    """What ``code`` prints, run by ``interpreter``."""
    return subprocess.run(
        [interpreter, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout


def query(interpreter: str, name: str) -> str:
    """One of Oban's bundled queries as Oban loads it (``Query._load_file``, its tables in the
    ``public`` prefix), from ``interpreter``."""
    return in_python(
        interpreter, f"from oban._query import Query; print(Query._load_file({name!r}))"
    )


def version(interpreter: str) -> str:
    return in_python(
        interpreter, "import importlib.metadata as m; print(m.version('oban'))"
    ).strip()


def install(interpreter: str, dsn: str) -> None:
    """Oban's schema in ``dsn``: its install.sql."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(query(interpreter, "install.sql").encode())


def _job(sequence: int) -> dict[str, Any]:
    """The parameters ``Oban.enqueue`` binds for a job of :data:`WORKER`, with its defaults."""
    return {
        "args": Jsonb({"n": sequence}),
        "inserted_at": None,
        "max_attempts": 20,
        "meta": Jsonb({}),
        "priority": 0,
        "queue": QUEUE,
        "scheduled_at": None,
        "state": "available",
        "tags": [],
        "worker": WORKER,
    }


class ObanAdapter(Adapter):
    name = "oban"
    distribution = "oban"
    # processes x the queue's limit.
    configs = (
        WorkerConfig(1, 10),
        WorkerConfig(1, 100),
        WorkerConfig(2, 50),
        WorkerConfig(2, 100),
    )
    latency_config = WorkerConfig(1, 4)
    clear_sql = "TRUNCATE oban_jobs"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE state = 'available'), count(*) FROM oban_jobs"
        " WHERE state IN ('available', 'executing')"
    )
    batch_note = "insert_job.sql per job, one transaction per batch (Oban.enqueue_many's way)"
    tuning_note = (
        "the queue's `limit` 10, 50 and 100 (Oban's README: queues={'default': 10}, a limit "
        "per queue and node), 1 and 2 processes (nodes); its notifier, stager and pruner at "
        "their defaults"
    )
    claims_in_batches = True

    def connections(self, concurrency: int) -> int:
        return 10

    def version(self) -> str:
        return version(python())

    def install(self) -> None:
        install(python(), self.dsn)
        self.insert = query(python(), "insert_job.sql")

    def open(self) -> None:
        self.connection = psycopg.connect(self.dsn)

    def close(self) -> None:
        self.connection.close()

    def push_one(self, sequence: int) -> None:
        with self.connection.transaction():
            self.connection.execute(self.insert, _job(sequence)).fetchone()

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        for first in range(start, start + count, batch):
            with self.connection.transaction():
                for sequence in range(first, min(first + batch, start + count)):
                    self.connection.execute(self.insert, _job(sequence)).fetchone()

    def start_workers(self, config: WorkerConfig, probe_port: int | None = None) -> Workers:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        module = "benchmarks.adapters.oban_worker"
        started = [
            CommandWorkers(
                [python(), "-m", module, self.dsn, str(config.concurrency), str(probe_port or 0)],
                env,
                str(ROOT),
            )
            for _ in range(config.processes)
        ]
        return _Several(started)


class _Several(Workers):
    """Several commands' processes as one set of workers."""

    def __init__(self, commands: list[CommandWorkers]) -> None:
        super().__init__(started_at=min(command.started_at for command in commands))
        self.commands = commands

    def alive(self) -> bool:
        return all(command.alive() for command in self.commands)

    def pids(self) -> list[int]:
        return [pid for command in self.commands for pid in command.pids()]

    def stop(self, timeout: float = 10.0) -> None:
        for command in self.commands:
            command.stop(timeout)


ADAPTER = ObanAdapter
