"""PGQueuer on asyncpg (its native driver): Queries.enqueue, scalar or list; QueueManager workers
under uvloop, as PGQueuer's own benchmark (tools/benchmark.py) runs them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver
from pgqueuer.models import Job
from pgqueuer.queries import Queries

from benchmarks import handlers, pg
from benchmarks.adapters import AsyncAdapter, WorkerConfig

ENTRYPOINT = "bench"


def _payload(sequence: int) -> bytes:
    return json.dumps({"n": sequence}).encode()


class PgqueuerAdapter(AsyncAdapter):
    name = "pgqueuer"
    distribution = "pgqueuer"
    # processes x queue managers per process (each with its own connection), batch_size.
    configs = (
        WorkerConfig(1, 1, (("batch_size", 100),)),
        WorkerConfig(1, 1, (("batch_size", 1000),)),
        WorkerConfig(2, 1, (("batch_size", 100),)),
        WorkerConfig(2, 1, (("batch_size", 500),)),
        WorkerConfig(2, 1, (("batch_size", 1000),)),
        WorkerConfig(2, 1, (("batch_size", 2000),)),
        WorkerConfig(2, 2, (("batch_size", 1000),)),
        WorkerConfig(4, 1, (("batch_size", 1000),)),
    )
    latency_config = WorkerConfig(1, 1, (("batch_size", 10),))
    clear_sql = "TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics"
    progress_sql = "SELECT count(*) FILTER (WHERE status = 'queued'), count(*) FROM pgqueuer"
    batch_note = "Queries.enqueue with lists (one INSERT ... SELECT FROM unnest per batch)"
    tuning_note = (
        "`batch_size` from 100 to 2,000 (its default is 10; PGQueuer's Performance Tuning guide, "
        "github.com/janbjorge/pgqueuer docs/guides/performance-tuning.md: increase it when jobs "
        "are short-lived), 1, 2 and 4 processes and 2 queue managers per process; `pgq "
        "autovac`'s table settings (`Queries.optimize_autovacuum`; the guide's checklist: run "
        "it after installation) applied at install. Issue 15 measured 18,900 jobs/s at 2 "
        "processes x batch_size 1000"
    )

    def install(self) -> None:
        async def install() -> None:
            connection = await asyncpg.connect(pg.as_uri(self.dsn))
            try:
                queries = Queries(AsyncpgDriver(connection))
                await queries.install()
                await queries.optimize_autovacuum()
            finally:
                await connection.close()

        asyncio.run(install())

    async def aopen(self) -> None:
        self.connection = await asyncpg.connect(pg.as_uri(self.dsn))
        self.queries = Queries(AsyncpgDriver(self.connection))

    async def aclose(self) -> None:
        await self.connection.close()

    async def apush_one(self, sequence: int) -> None:
        await self.queries.enqueue(ENTRYPOINT, _payload(sequence))

    def enqueue_batch(self, start: int, count: int, batch: int) -> None:
        async def loop() -> None:
            for first in range(start, start + count, batch):
                sequences = range(first, min(first + batch, start + count))
                await self.queries.enqueue(
                    [ENTRYPOINT] * len(sequences),
                    [_payload(n) for n in sequences],
                    [0] * len(sequences),
                )

        self.run(loop())


async def _work(dsn: str, config: WorkerConfig) -> None:
    managers = []
    for _ in range(config.concurrency):
        pgq = PgQueuer(AsyncpgDriver(await asyncpg.connect(pg.as_uri(dsn))))

        @pgq.entrypoint(ENTRYPOINT)
        async def handler(job: Job) -> None:
            handlers.handle(json.loads(job.payload or b"{}")["n"])

        managers.append(pgq)
    await asyncio.gather(*(pgq.run(batch_size=config.option("batch_size", 10)) for pgq in managers))


def worker_main(dsn: str, config: WorkerConfig, probe_port: int | None) -> None:
    import uvloop

    handlers.configure(probe_port)
    runner: Any = uvloop.run
    runner(_work(dsn, config))


ADAPTER = PgqueuerAdapter
