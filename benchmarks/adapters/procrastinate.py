"""procrastinate on psycopg 3: an async task deferred with defer_async / batch_defer_async;
workers are App.run_worker_async with LISTEN/NOTIFY (its default) and ``concurrency`` slots."""

from __future__ import annotations

import asyncio
from typing import Any

import procrastinate

from benchmarks import handlers
from benchmarks.adapters import AsyncAdapter, WorkerConfig

QUEUE = "bench"


def make_app(dsn: str) -> tuple[procrastinate.App, Any]:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))

    @app.task(name="bench", queue=QUEUE)
    async def bench(n: int) -> None:
        handlers.handle(n)

    return app, bench


class ProcrastinateAdapter(AsyncAdapter):
    name = "procrastinate"
    distribution = "procrastinate"
    configs = (
        WorkerConfig(2, 10, (("delete_jobs", "successful"),)),
        WorkerConfig(2, 30, (("delete_jobs", "successful"),)),
        WorkerConfig(2, 30),
        WorkerConfig(2, 100, (("delete_jobs", "successful"),)),
        WorkerConfig(4, 30, (("delete_jobs", "successful"),)),
    )
    latency_config = WorkerConfig(1, 4)
    clear_sql = "TRUNCATE procrastinate_jobs CASCADE"
    progress_sql = (
        "SELECT count(*) FILTER (WHERE status = 'todo'), count(*) FROM procrastinate_jobs"
        " WHERE status IN ('todo', 'doing')"
    )
    batch_note = "Task.batch_defer_async (one INSERT per batch)"
    tuning_note = (
        "`concurrency` 10, 30 and 100 per worker (github.com/procrastinate-org/procrastinate "
        "docs/howto/concurrency.md: `app.run_worker(concurrency=30)`, and more workers, each "
        "in its own process), 2 and 4 processes; `delete_jobs='successful'` "
        "(docs/howto/production/delete_finished_jobs.md: delete jobs on completion, as "
        "Postkit's ack does) and its default (keep them)"
    )
    claims_in_batches = False

    def install(self) -> None:
        async def install() -> None:
            app, _ = make_app(self.dsn)
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(install())

    async def aopen(self) -> None:
        self.app, self.task = make_app(self.dsn)
        await self.app.open_async()

    async def aclose(self) -> None:
        await self.app.close_async()

    async def apush_one(self, sequence: int) -> None:
        await self.task.defer_async(n=sequence)

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        async def loop() -> None:
            for first in range(start, start + count, batch):
                last = min(first + batch, start + count)
                await self.task.batch_defer_async(*({"n": n} for n in range(first, last)))

        self.run(loop())

    def fill(self, start: int, count: int) -> None:
        # Not timed: the rows batch_defer writes, made server-side (its trigger still runs).
        self._monitor().execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args)"
            " SELECT %s, 'bench', jsonb_build_object('n', g)"
            " FROM generate_series(%s::int, %s::int) AS g",
            (QUEUE, start, start + count - 1),
        )


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    handlers.configure(probe_port)
    app, _ = make_app(dsn)

    async def work() -> None:
        async with app.open_async():
            await app.run_worker_async(
                queues=[QUEUE],
                concurrency=config.concurrency,
                wait=True,
                listen_notify=True,
                delete_jobs=config.option("delete_jobs", "never"),
            )

    asyncio.run(work())


ADAPTER = ProcrastinateAdapter
