"""What a worker's round trip costs the client: ack_and_pull on one connection, no handler.

A worker settles the jobs that finished and claims the next batch in one statement
(``QueueClient.ack_and_pull``). On a small machine the worker's Python shares the cores with
PostgreSQL, so the client's CPU per job limits the drain rate as much as the server's work does.
This drains a preloaded queue with ack_and_pull alone, one batch per transaction, and reports
the rate and the process's CPU time per job (building the statement, reading the rows, making
the Job objects).
"""

from __future__ import annotations

import time

import psycopg

from postkit.queue import Job, QueueClient

QUEUE = "roundtrip"


def drain(dsn: str, *, jobs: int, batch: int) -> tuple[float, float]:
    """Preload ``jobs`` jobs, then drain them ``batch`` at a time. Returns (jobs per second,
    client CPU microseconds per job)."""
    namespace = f"bench-roundtrip-{time.time_ns()}"
    with psycopg.connect(dsn) as connection:
        queue = QueueClient(connection.cursor(), namespace=namespace)
        for first in range(0, jobs, 1000):
            queue.push_batch(QUEUE, list(range(first, min(first + 1000, jobs))))
        connection.commit()
        held: list[Job] = []
        settled = 0
        cpu_started, started = time.process_time(), time.perf_counter()
        while True:
            acked, held = queue.ack_and_pull(QUEUE, held, limit=batch, worker_id="bench")
            connection.commit()
            settled += len(acked)
            if not held:
                break
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return settled / elapsed, cpu / settled * 1e6
