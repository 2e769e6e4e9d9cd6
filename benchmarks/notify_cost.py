"""What a push's NOTIFY costs: single-job push transactions with notifications on and off.

NOTIFY takes a database-wide lock at commit, which is what capped some peers at a few thousand
pushes per second. Postkit notifies at most once per transaction and queue (PostgreSQL folds
identical notifications), and a session can turn them off with
``SET postkit_queue.notify = off``. This measures the difference on one connection, with and
without a listener connected.
"""

from __future__ import annotations

import time

import psycopg

from postkit.queue import QueueClient

QUEUE = "notify-cost"


def pushes_per_second(dsn: str, *, jobs: int, notify: bool, listening: bool) -> float:
    namespace = f"bench-notify-{time.time_ns()}"
    with psycopg.connect(dsn, autocommit=True) as listener, psycopg.connect(dsn) as connection:
        if listening:
            channel = listener.execute(
                "SELECT postkit_queue.channel(%s, %s)", (namespace, QUEUE)
            ).fetchone()
            assert channel is not None
            listener.execute(f'LISTEN "{channel[0]}"')
        connection.execute(f"SET postkit_queue.notify = {'on' if notify else 'off'}")
        connection.commit()
        queue = QueueClient(connection.cursor(), namespace=namespace)
        started = time.perf_counter()
        for sequence in range(jobs):
            queue.push(QUEUE, sequence)
            connection.commit()
        elapsed = time.perf_counter() - started
        connection.execute("DELETE FROM postkit_queue.jobs WHERE namespace = %s", (namespace,))
        connection.commit()
    return jobs / elapsed
