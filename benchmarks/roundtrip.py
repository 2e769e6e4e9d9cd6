"""What a worker's round trip costs the client: ack_and_pull on one connection, no handler.

A worker settles the jobs that finished and claims the next batch in one statement
(``QueueClient.ack_and_pull``). On a small machine the worker's Python shares the cores with
PostgreSQL, so the client's CPU per job limits the drain rate as much as the server's work does.
This drains a preloaded queue with ack_and_pull alone, one batch per transaction, and reports
the rate and the process's CPU time per job (building the statement, reading the rows, making
the Job objects).

``worker_drain`` drains a preloaded backlog with a whole :class:`~postkit.worker.Worker`
instead, with a no-op handler, plain or transactional (the handler's transaction carries the
ack): a transactional job settles on its own thread, and each must wake the worker to fill its
slot, or the backlog drains one batch per fallback poll.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import psycopg

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, Worker

QUEUE = "roundtrip"


def _preloaded(connection: psycopg.Connection, namespace: str, jobs: int) -> QueueClient:
    """Push ``jobs`` jobs to the benchmark's queue of ``namespace``, committed; returns the
    client."""
    queue = QueueClient(connection.cursor(), namespace=namespace)
    for first in range(0, jobs, 1000):
        queue.push_batch(QUEUE, list(range(first, min(first + 1000, jobs))))
    connection.commit()
    return queue


def drain(dsn: str, *, jobs: int, batch: int) -> tuple[float, float]:
    """Preload ``jobs`` jobs, then drain them ``batch`` at a time. Returns (jobs per second,
    client CPU microseconds per job)."""
    namespace = f"bench-roundtrip-{time.time_ns()}"
    with psycopg.connect(dsn) as connection:
        queue = _preloaded(connection, namespace, jobs)
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


# The leaner claim result the narrow drain weighs: ack_and_pull's statement with only the
# columns a worker cannot know already (the queue, namespace, state and worker id are its own
# call's), read as tuples.
NARROW_ROUND_TRIP = """
SELECT CASE WHEN coalesce(j.ordinality, 1) = 1 THEN a.acked END, j.id,
       j.payload::text, j.attempts, j.max_attempts, j.claim_token::text, j.visible_until,
       j.priority, j.run_at, j.unique_key, j.claimed_at, j.errors::text, j.created_at
FROM postkit_queue.ack_many(%s, %s::bigint[], %s::uuid[]) AS a(acked)
LEFT JOIN LATERAL postkit_queue.pull(%s, %s, %s, NULL, %s) WITH ORDINALITY AS j ON true
"""


def narrow_drain(dsn: str, *, jobs: int, batch: int) -> tuple[float, float]:
    """As :func:`drain`, with the leaner claim result (``NARROW_ROUND_TRIP``) turned into the
    same Job records, the fields the worker knows filled in without reading them."""
    namespace = f"bench-roundtrip-narrow-{time.time_ns()}"
    with psycopg.connect(dsn) as connection:
        _preloaded(connection, namespace, jobs)
        cursor = connection.cursor()
        held: list[Job] = []
        settled = 0
        cpu_started, started = time.process_time(), time.perf_counter()
        while True:
            ids = [job.id for job in held]
            tokens = [job.claim_token for job in held]
            cursor.execute(
                NARROW_ROUND_TRIP, (namespace, ids, tokens, namespace, QUEUE, "bench", batch)
            )
            rows = cursor.fetchall()
            connection.commit()
            settled += len(rows[0][0]) if rows and rows[0][0] else 0
            held = [
                Job(
                    id=row[1],
                    queue=QUEUE,
                    payload=json.loads(row[2]),
                    attempts=row[3],
                    max_attempts=row[4],
                    worker_id="bench",
                    claim_token=row[5],
                    visible_until=row[6],
                    state="running",
                    priority=row[7],
                    run_at=row[8],
                    namespace=namespace,
                    unique_key=row[9],
                    claimed_at=row[10],
                    errors=tuple(json.loads(row[11])),
                    created_at=row[12],
                )
                for row in rows
                if row[1] is not None
            ]
            if not held:
                break
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    return settled / elapsed, cpu / settled * 1e6


def worker_drain(dsn: str, *, jobs: int, transactional: bool, batch: int = 1) -> float:
    """Preload ``jobs`` jobs, then drain them with a Worker (concurrency 8, its defaults
    otherwise) whose handler does nothing (a transactional one with ``batch``). Returns jobs
    per second, from the worker's start to its last ack."""
    namespace = f"bench-worker-drain-{time.time_ns()}"
    with psycopg.connect(dsn) as connection:
        _preloaded(connection, namespace, jobs)
    handlers = Handlers()
    if transactional:

        def in_the_acks_transaction(job: Job, cursor: Any) -> None:
            pass

        handlers.add(QUEUE, in_the_acks_transaction, transactional=True, batch=batch)
    else:
        handlers.add(QUEUE, lambda job: None)
    worker = Worker(dsn, handlers, namespace=namespace, concurrency=8, vacuum_interval=None)
    thread = threading.Thread(target=worker.run, daemon=True)
    started = time.perf_counter()
    thread.start()
    try:
        while worker.stats.completed < jobs:
            if not thread.is_alive():
                raise RuntimeError("the worker stopped before the backlog drained")
            time.sleep(0.002)
        elapsed = time.perf_counter() - started
    finally:
        worker.stop()
        thread.join(timeout=60)
    return jobs / elapsed
