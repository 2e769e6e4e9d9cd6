"""Chancy: Chancy.push / push_many of a plain function job; Worker processes running the queue
with the asyncio executor (the no-op handler needs no process or thread pool), notifications on
(its default) and eager polling."""

from __future__ import annotations

import asyncio
import logging

from chancy import Chancy, Job, Queue, Worker
from chancy.utils import importable_name

from benchmarks import handlers
from benchmarks.adapters import AsyncAdapter, WorkerConfig

QUEUE = "bench"


def _queue(config: WorkerConfig) -> Queue:
    return Queue(
        name=QUEUE,
        concurrency=config.concurrency,
        executor=config.option("executor", Chancy.Executor.Async),
        polling_interval=1,
        eager_polling=True,
    )


def _job(sequence: int) -> Job:
    return Job.from_func(handlers.async_noop, queue=QUEUE, kwargs={"n": sequence})


def _quiet() -> logging.Logger:
    log = logging.getLogger("benchmarks.chancy")
    log.setLevel(logging.WARNING)
    return log


class ChancyAdapter(AsyncAdapter):
    name = "chancy"
    distribution = "chancy"
    configs = (
        WorkerConfig(2, 20),
        WorkerConfig(2, 50),
        WorkerConfig(2, 200),
        WorkerConfig(4, 50),
    )
    latency_config = WorkerConfig(1, 4)
    clear_sql = "TRUNCATE chancy_jobs CASCADE"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FROM chancy_jobs"
        " WHERE state IN ('pending', 'running', 'retrying')"
    )
    batch_note = "Chancy.push_many (one INSERT round trip per job, one transaction per batch)"
    tuning_note = (
        "the queue's `concurrency` 20, 50 and 200 with the AsyncExecutor (chancy/executors/"
        "asyncex.py: for large numbers of IO-bound jobs, many at once without the overhead of "
        "processes or threads), `eager_polling=True` (chancy/queue.py: poll again as soon as a "
        "job completes, for jobs continuously available), 2 and 4 worker processes"
    )

    def install(self) -> None:
        async def install() -> None:
            async with Chancy(self.dsn, log=_quiet()) as chancy:
                await chancy.migrate()

        asyncio.run(install())

    async def aopen(self) -> None:
        self.chancy = Chancy(self.dsn, log=_quiet())
        await self.chancy.__aenter__()

    async def aclose(self) -> None:
        await self.chancy.__aexit__(None, None, None)

    async def apush_one(self, sequence: int) -> None:
        await self.chancy.push(_job(sequence))

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        async def push() -> None:
            jobs = [_job(n) for n in range(start, start + count)]
            async for _ in self.chancy.push_many(jobs, batch_size=batch):
                pass

        self.run(push())

    def fill(self, start: int, count: int) -> None:
        # Not timed: rows as Chancy.push writes them (the columns it leaves to their defaults
        # too), made server-side; the workers find them at their next poll (1 s).
        self._monitor().execute(
            "INSERT INTO chancy_jobs (id, queue, func, kwargs)"
            " SELECT gen_random_uuid(), %s, %s, json_build_object('n', g)"
            " FROM generate_series(%s::int, %s::int) AS g",
            (QUEUE, importable_name(handlers.async_noop), start, start + count - 1),
        )


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)

    async def work() -> None:
        async with Chancy(dsn, log=_quiet()) as chancy:
            await chancy.declare(_queue(config), upsert=True)
            async with Worker(chancy) as worker:
                await worker.wait_for_shutdown()

    asyncio.run(work())


ADAPTER = ChancyAdapter
