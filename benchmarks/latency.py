"""W2, idle latency: from a push's commit to its handler starting, on an idle worker.

A worker process waits on LISTEN/NOTIFY. The benchmark pushes jobs one at a time, a fixed gap
apart, and records the moment each push's commit returned; the handler records the moment it
starts. Both read CLOCK_MONOTONIC (``time.perf_counter_ns``), which is one clock for every
process on Linux.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection

import psycopg

from benchmarks.common import percentile
from postkit.queue import Job, QueueClient
from postkit.worker import Worker

QUEUE = "latency"


def _worker(dsn: str, namespace: str, started: Connection, ready: Connection) -> None:
    def handler(job: Job) -> None:
        started.send((job.payload, time.perf_counter_ns()))

    worker = Worker(dsn, {QUEUE: handler}, namespace=namespace, concurrency=4, poll_interval=5)
    ready.send("ready")
    worker.run()


def measure(dsn: str, *, jobs: int = 200, gap: float = 0.02) -> list[float]:
    """Milliseconds from each push's commit to its handler's start."""
    namespace = f"bench-latency-{time.time_ns()}"
    context = multiprocessing.get_context("spawn")
    started_reader, started_writer = context.Pipe(duplex=False)
    ready_reader, ready_writer = context.Pipe(duplex=False)
    process = context.Process(
        target=_worker, args=(dsn, namespace, started_writer, ready_writer), daemon=True
    )
    process.start()
    ready_reader.recv()
    committed: dict[int, int] = {}
    try:
        with psycopg.connect(dsn) as connection:
            queue = QueueClient(connection.cursor(), namespace=namespace)
            time.sleep(1.0)  # let the worker reach its LISTEN wait
            for sequence in range(jobs):
                queue.push(QUEUE, sequence)
                connection.commit()
                committed[sequence] = time.perf_counter_ns()
                time.sleep(gap)
        latencies = []
        for _ in range(jobs):
            if not started_reader.poll(10):
                raise RuntimeError("the worker stopped answering")
            sequence, at = started_reader.recv()
            latencies.append((at - committed[sequence]) / 1e6)
        return latencies
    finally:
        process.terminate()
        process.join(10)


def report(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "max_ms": max(latencies),
    }
