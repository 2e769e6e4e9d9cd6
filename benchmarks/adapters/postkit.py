"""Postkit: QueueClient.push on the producer's connection; postkit.worker.Worker workers.

Jobs go to the ``default`` namespace, where ``postkit worker`` works without a ``--namespace``
(the defaults row, ``benchmarks.adapters.postkit_defaults``, starts the command with no option
but ``--processes``). A configuration with the ``transactional`` option runs a transactional
handler instead, which inserts one row into ``bench_side`` in the ack's transaction."""

from __future__ import annotations

from typing import Any, ClassVar

import psycopg

from benchmarks import handlers
from benchmarks.adapters import Adapter, WorkerConfig
from postkit.queue import Job, QueueClient, install
from postkit.worker import Handlers, Worker

NAMESPACE = "default"
QUEUE = "bench"


class PostkitAdapter(Adapter):
    name = "postkit"
    distribution = "postkit-queue"
    configs: ClassVar[tuple[WorkerConfig, ...]] = (
        WorkerConfig(1, 32),
        WorkerConfig(2, 8),
        WorkerConfig(2, 32),
        WorkerConfig(2, 64),
        WorkerConfig(2, 128),
        # The fixed prefetch of earlier releases (as many as the concurrency), for the
        # adaptive one's before and after in the same run (docs/performance.md).
        WorkerConfig(2, 8, (("prefetch", 8),)),
        WorkerConfig(2, 64, (("prefetch", 64),)),
    )
    latency_config = WorkerConfig(1, 4)
    clear_sql = "TRUNCATE postkit_queue.jobs, postkit_queue.dead_letters, bench_side"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FROM postkit_queue.jobs"
    )
    batch_note = (
        "QueueClient.push_batch (one statement, so one round trip and one transaction per "
        "batch) when the client has it; before it, QueueClient.push once per job in one "
        "transaction per batch. A single push is one statement on an autocommit connection: "
        "the job is its own transaction, in one round trip"
    )
    tuning_note = (
        "`Worker(concurrency=...)` with its default prefetch (adaptive: about 0.1 s of the "
        "jobs a process settles, from the concurrency to 500), 1-2 processes; the CLI's "
        "default is `--concurrency 8` per process. The two `prefetch=` rows hold the fixed "
        "prefetch of earlier releases (as many as the concurrency), for comparison"
    )

    def connections(self, concurrency: int) -> int:
        # Worker's pool (concurrency + 2), its LISTEN connection and two for maintenance.
        return concurrency + 5

    def install(self) -> None:
        with psycopg.connect(self.dsn) as connection:
            install(connection)
            connection.execute("CREATE TABLE bench_side (n bigint NOT NULL)")

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


def _transactional_handler(job: Job, cursor: Any) -> None:
    cursor.execute("INSERT INTO bench_side (n) VALUES (%s)", (job.payload["n"],))
    handlers.handle(job.payload["n"])


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    registered = Handlers()
    if config.option("transactional"):
        registered.add(
            QUEUE, _transactional_handler, transactional=True, batch=config.option("batch", 1)
        )
    else:
        registered.add(QUEUE, _handler)
    worker = Worker(
        dsn,
        registered,
        namespace=NAMESPACE,
        concurrency=config.concurrency,
        prefetch=config.option("prefetch"),
        grace_period=5,
    )
    worker.run()


ADAPTER = PostkitAdapter
