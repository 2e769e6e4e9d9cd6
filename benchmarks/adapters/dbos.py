"""DBOS Transact: a workflow enqueued with DBOSClient.enqueue, one at a time, and with
``enqueue_in_transaction`` many to a transaction for batches; worker processes are DBOS
applications (``DBOS.launch``) with the workflow registered and the queue declared with
``DBOS.register_queue``; the workflow's body is the shared no-op."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import sqlalchemy
from dbos import DBOS, DBOSClient

from benchmarks import handlers, pg
from benchmarks.adapters import Adapter, WorkerConfig

QUEUE = "bench"
WORKFLOW = "bench_noop"
ENQUEUE = {"queue_name": QUEUE, "workflow_name": WORKFLOW}


def _quiet() -> None:
    logging.getLogger("dbos").setLevel(logging.WARNING)


class DbosAdapter(Adapter):
    name = "dbos"
    distribution = "dbos"
    # processes x the queue's worker_concurrency, with its polling interval.
    configs = (
        WorkerConfig(1, 16, (("polling_interval_sec", 0.1),)),
        WorkerConfig(1, 64, (("polling_interval_sec", 0.1),)),
        WorkerConfig(2, 64, (("polling_interval_sec", 0.1),)),
        WorkerConfig(2, 64, (("polling_interval_sec", 1.0),)),
    )
    latency_config = WorkerConfig(1, 4, (("polling_interval_sec", 0.1),))
    clear_sql = "TRUNCATE dbos.workflow_status CASCADE"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE status = 'ENQUEUED'),"
        " count(*) FILTER (WHERE status IN ('ENQUEUED', 'PENDING')) FROM dbos.workflow_status"
    )
    batch_note = (
        "DBOSClient.enqueue_in_transaction, one INSERT per workflow, one transaction per batch"
    )
    tuning_note = (
        "the queue's `worker_concurrency` 16 and 64 per process (DBOS's queue tutorial: limit "
        "how many workflows an executor runs at once), 1 and 2 processes, its "
        "`polling_interval_sec` at 0.1 s and at its default (1 s); `use_listen_notify` at its "
        "default (off); each process an executor of its own"
    )
    claims_in_batches = False

    def connections(self, concurrency: int) -> int:
        return 25  # SQLAlchemy's pool: 20 connections and the queue's poller

    def install(self) -> None:
        # DBOS's system tables, by its own command (`dbos migrate`).
        subprocess.run(
            [str(Path(sys.executable).parent / "dbos"), "migrate", "--sys-db-url", self._url()],
            check=True,
            capture_output=True,
        )

    def _url(self) -> str:
        return pg.as_uri(self.dsn)

    def _engine(self) -> sqlalchemy.Engine:
        return sqlalchemy.create_engine(
            self._url().replace("postgresql://", "postgresql+psycopg://")
        )

    def open(self) -> None:
        self.client = DBOSClient(system_database_url=self._url())

    def close(self) -> None:
        self.client.destroy()

    def push_one(self, sequence: int) -> None:
        self.client.enqueue(ENQUEUE, sequence)  # type: ignore[arg-type]

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        engine = self._engine()
        try:
            for first in range(start, start + count, batch):
                with engine.begin() as connection:
                    for sequence in range(first, min(first + batch, start + count)):
                        self.client.enqueue_in_transaction(connection, ENQUEUE, sequence)  # type: ignore[arg-type]
        finally:
            engine.dispose()


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    _quiet()
    config_: Any = {
        "name": "bench",
        "system_database_url": pg.as_uri(dsn),
        "log_level": "WARNING",
    }
    DBOS(config=config_)

    @DBOS.workflow(name=WORKFLOW)
    def bench_noop(n: int) -> None:
        handlers.handle(n)

    DBOS.launch()
    DBOS.register_queue(
        QUEUE,
        worker_concurrency=config.concurrency,
        polling_interval_sec=config.option("polling_interval_sec", 1.0),
    )
    threading.Event().wait()  # until SIGTERM ends the process


ADAPTER = DbosAdapter
