"""Postkit: QueueClient.push on the producer's connection; postkit.worker.Worker workers."""

from __future__ import annotations

from typing import Any

import psycopg

from benchmarks import handlers
from benchmarks.adapters import Adapter, WorkerConfig
from postkit.queue import Job, QueueClient, install
from postkit.worker import Worker

NAMESPACE = "bench"
QUEUE = "bench"


class PostkitAdapter(Adapter):
    name = "postkit"
    distribution = "postkit"
    configs = (
        WorkerConfig(1, 8),
        WorkerConfig(2, 8),
        WorkerConfig(2, 16),
        WorkerConfig(2, 32),
    )
    latency_config = WorkerConfig(1, 4)
    clear_sql = "TRUNCATE postkit_queue.jobs, postkit_queue.dead_letters"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FROM postkit_queue.jobs"
    )
    batch_note = (
        "QueueClient.push_batch (one statement, so one round trip and one transaction per "
        "batch) when the client has it; before it, QueueClient.push once per job in one "
        "transaction per batch. A single push is one statement on an autocommit connection: "
        "the job is its own transaction, in one round trip"
    )

    def install(self) -> None:
        with psycopg.connect(self.dsn) as connection:
            install(connection)

    def open(self) -> None:
        # Autocommit: each push is its own transaction, committed by the server with the
        # statement, as a web request that enqueues a standalone job would do it.
        self.connection = psycopg.connect(self.dsn, autocommit=True)
        self.client = QueueClient(self.connection.cursor(), namespace=NAMESPACE)

    def close(self) -> None:
        self.connection.close()

    def push_one(self, sequence: int) -> None:
        self.client.push(QUEUE, {"n": sequence})

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        push_batch = getattr(self.client, "push_batch", None)
        for first in range(start, start + count, batch):
            sequences = range(first, min(first + batch, start + count))
            if push_batch is not None:
                push_batch(QUEUE, [{"n": sequence} for sequence in sequences])
                continue
            with self.connection.transaction():
                for sequence in sequences:
                    self.client.push(QUEUE, {"n": sequence})


def _handler(job: Job) -> None:
    handlers.handle(job.payload["n"])


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    options: dict[str, Any] = {"poll_interval": config.option("poll_interval", 5.0)}
    worker = Worker(
        dsn,
        {QUEUE: _handler},
        namespace=NAMESPACE,
        concurrency=config.concurrency,
        grace_period=5,
        **options,
    )
    worker.run()


ADAPTER = PostkitAdapter
