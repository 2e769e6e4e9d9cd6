"""A worker serving several queues shares its slots between them: a queue with a deep backlog
cannot crowd out the jobs of another (flow control's fair share, docs/guarantees.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from postkit.queue import Job, QueueClient
from postkit.worker import Worker
from tests.signals import wait_until
from tests.threads import QUIET, worker_threads


def test_a_quiet_queues_jobs_start_within_the_first_claims_despite_a_deep_backlog(
    make_client: Callable[[], QueueClient], dsn: str, namespace: str
) -> None:
    producer = make_client()
    producer.push_batch("backlog", [{"n": n} for n in range(400)])
    producer.push_batch("quiet", [{"n": n} for n in range(4)])
    producer.cursor.connection.commit()
    started: list[str] = []
    lock = threading.Lock()

    def record(job: Job) -> None:
        with lock:
            started.append(job.queue)
        if job.queue == "backlog":
            time.sleep(0.05)  # every slot a claim gives the backlog stays taken for a while

    with worker_threads() as run:
        run(
            Worker(
                dsn,
                {"backlog": record, "quiet": record},
                namespace=namespace,
                concurrency=8,
                prefetch=0,
                **QUIET,
            )
        )
        wait_until(lambda: started.count("quiet") == 4, "the quiet queue's jobs to start")

    # The worker's first claim fills its eight free slots, the backlog first: half of them
    # are the backlog's share, and the quiet queue's four jobs take the other half, so they
    # start among the first eight jobs, not once the backlog's first jobs give slots back.
    quiet_positions = [position for position, queue in enumerate(started) if queue == "quiet"]
    assert max(quiet_positions) < 8, started[:16]


def test_queues_weighing_3_and_1_start_3_jobs_to_1_while_both_have_work(
    make_client: Callable[[], QueueClient], dsn: str, namespace: str
) -> None:
    producer = make_client()
    for queue in ("heavy", "light"):
        producer.push_batch(queue, [{"n": n} for n in range(100)])
    producer.cursor.connection.commit()
    started: list[str] = []
    lock = threading.Lock()

    def record(job: Job) -> None:
        with lock:
            started.append(job.queue)

    with worker_threads() as run:
        run(
            Worker(
                dsn,
                {"heavy": record, "light": record},
                namespace=namespace,
                queues={"heavy": 3, "light": 1},
                concurrency=1,
                prefetch=0,
                **QUIET,
            )
        )
        wait_until(lambda: len(started) >= 40, "forty jobs to start")

    # One slot: each claim takes one job, of the queue whose round it is (3 in 4 the heavy
    # one's), where equal weights give 20 of each.
    assert started[:40].count("heavy") == 30, started[:40]
