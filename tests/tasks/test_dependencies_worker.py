"""Jobs that wait for jobs, run by a real worker: a fan-out of typed tasks and a fan-in that
reads their results, started promptly by the last parent's ack (a notification, not a poll)."""

from __future__ import annotations

import queue as stdlib_queue
from typing import Any

import pytest

from postkit import tasks
from postkit.queue import QueueClient
from postkit.tasks import App
from tests.signals import wait_until
from tests.tasks.conftest import StartWorker


def test_a_fan_in_runs_after_its_fan_out_and_reads_each_parents_result(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    totals: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()

    @app.task(queue="squares", retain_results=3600)
    def square(n: int) -> int:
        return n * n

    @app.task(queue="totals")
    def total() -> None:
        totals.put(dict(tasks.parent_results()))

    start_worker(app)
    parents = square.push_many(client.cursor, [{"n": n} for n in (1, 2, 3)])
    child = total.options(depends_on=[p for p in parents if p is not None]).push(client.cursor)

    assert totals.get(timeout=15) == dict(zip(parents, [1, 4, 9], strict=True))
    wait_until(lambda: client.result(child).state == "unknown", f"job {child} to complete")


def test_parent_results_outside_a_worker_says_where_it_works() -> None:
    with pytest.raises(RuntimeError, match="while a worker"):
        tasks.parent_results()
