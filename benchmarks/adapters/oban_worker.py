"""An Oban for Python worker process, run by the interpreter given to ``--oban-python`` (Oban
needs Python 3.12+): ``python -m benchmarks.adapters.oban_worker DSN LIMIT PROBE_PORT``.

It imports nothing of the benchmark but :mod:`benchmarks.handlers` (the standard library
only), so that interpreter needs only ``oban`` and psycopg."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from oban import Oban, worker
from psycopg_pool import AsyncConnectionPool

from benchmarks import handlers

QUEUE = "bench"


@worker(queue=QUEUE)
class Bench:
    """Its name, ``benchmarks.adapters.oban_worker.Bench``, is the jobs' ``worker`` column."""

    async def process(self, job: Any) -> None:
        handlers.handle(job.args["n"])


async def _work(dsn: str, limit: int) -> None:
    # Oban's own pieces take connections of the pool beside the queue's fetches and acks.
    pool = AsyncConnectionPool(dsn, min_size=2, max_size=10, open=False)
    await pool.open()
    oban = Oban(pool=pool, queues={QUEUE: limit})
    await oban.start()
    await asyncio.Event().wait()  # until SIGTERM ends the process


if __name__ == "__main__":
    handlers.configure(int(sys.argv[3]) or None)
    asyncio.run(_work(sys.argv[1], int(sys.argv[2])))
