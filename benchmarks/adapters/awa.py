"""awa (awa-pg, a Rust runtime with a Python API): AsyncClient.insert one at a time,
``enqueue_many_copy`` (COPY) for batches, on its queue storage (``install_queue_storage``, the
backend ``enqueue_many_copy`` needs); worker processes run ``AsyncClient.start`` with a queue of
``max_workers`` slots and ``claimers`` claim loops, the handler an ``async def``."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import awa

from benchmarks import handlers, pg
from benchmarks.adapters import AsyncAdapter, WorkerConfig

QUEUE = "bench"


@dataclasses.dataclass
class Bench:
    """The job's arguments: awa serialises a dataclass and names its kind after it."""

    n: int


def _jobs(start: int, count: int) -> list[Bench]:
    return [Bench(n) for n in range(start, start + count)]


class AwaAdapter(AsyncAdapter):
    name = "awa"
    distribution = "awa-pg"
    # processes x max_workers, claimers and claim_batch_size of the queue.
    configs = (
        WorkerConfig(1, 64),
        WorkerConfig(1, 64, (("claimers", 2), ("claim_batch_size", 256))),
        WorkerConfig(1, 256, (("claimers", 4), ("claim_batch_size", 256))),
        WorkerConfig(2, 64, (("claimers", 2), ("claim_batch_size", 256))),
        WorkerConfig(2, 256, (("claimers", 2), ("claim_batch_size", 256))),
    )
    latency_config = WorkerConfig(1, 4)
    # awa's queue storage appends each enqueued job to ready_entries and records completions
    # in batches (receipt_completion_batches) or, on its other path, in done_entries; a ring
    # of partitions is truncated once every job in it is finished, both sides at once. Jobs
    # not yet finished are the difference; those not yet claimed are counted the same way (a
    # claim is not cheaply countable), so a drain's clock starts at its first completion.
    progress_sql = (
        "WITH left_ AS (SELECT (SELECT count(*) FROM awa.ready_entries)"
        " - (SELECT coalesce(sum(completed_count), 0) FROM awa.receipt_completion_batches)"
        " - (SELECT count(*) FROM awa.done_entries) AS n) SELECT n, n FROM left_"
    )
    batch_note = "AsyncClient.enqueue_many_copy (COPY into its queue storage, one per batch)"
    tuning_note = (
        "`max_workers` 64 and 256 per process, with its default claim loop and with "
        "`claimers` 2 and 4 and `claim_batch_size` 256 (awa's AsyncClient.start docstring: "
        "claimers and claim_batch_size for hot queue-storage queues, benchmark 2 or 4), 1 and "
        "2 processes; its queue storage installed with its defaults (16 queue slots, 8 lease "
        "slots); poll interval at its default (200 ms)"
    )

    def connections(self, concurrency: int) -> int:
        return _pool_size(concurrency)

    def install(self) -> None:
        async def install() -> None:
            client = awa.AsyncClient(pg.as_uri(self.dsn))
            try:
                await client.migrate()
                await client.install_queue_storage(reset=True)
            finally:
                await client.close()

        asyncio.run(install())

    def clear(self) -> None:
        # A new database: awa's reset of its queue storage makes its types anew, which the
        # open pool's cached type ids no longer name.
        self.close()
        self.close_monitor()
        self.setup()

    async def aopen(self) -> None:
        self.client = awa.AsyncClient(pg.as_uri(self.dsn), max_connections=4)

    async def aclose(self) -> None:
        await self.client.close()

    async def apush_one(self, sequence: int) -> None:
        await self.client.insert(Bench(sequence), queue=QUEUE)

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        async def loop() -> None:
            for first in range(start, start + count, batch):
                size = min(batch, start + count - first)
                await self.client.enqueue_many_copy(_jobs(first, size), queue=QUEUE)

        self.run(loop())


def _pool_size(concurrency: int) -> int:
    """A worker process's connection pool: its claim loops, heartbeats and maintenance, and
    the completions of ``concurrency`` slots, which awa batches."""
    return concurrency // 8 + 8


async def _work(dsn: str, config: WorkerConfig) -> None:
    client = awa.AsyncClient(pg.as_uri(dsn), max_connections=_pool_size(config.concurrency))

    @client.task(Bench, queue=QUEUE)
    async def handle(job: Any) -> None:
        handlers.handle(job.args.n)

    queue: dict[str, Any] = {"name": QUEUE, "max_workers": config.concurrency}
    queue.update(config.options)
    await client.start([queue])
    await asyncio.Event().wait()  # until SIGTERM ends the process


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    asyncio.run(_work(dsn, config))


ADAPTER = AwaAdapter
