"""A worker hands a child its parents' results (``Job.parent_results``), whatever kind of
handler runs it."""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
from typing import Any

import pytest

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers
from tests.worker.conftest import StartWorker


@pytest.mark.parametrize("kind", ["sync", "async", "transactional"])
def test_a_handler_gets_its_parents_results_on_the_job(
    start_worker: StartWorker, client: QueueClient, kind: str
) -> None:
    seen: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()
    handlers.add("parents", lambda job: {"from": job.id})

    if kind == "sync":
        handlers.add("children", lambda job: seen.put(job.parent_results))
    elif kind == "async":

        async def child(job: Job) -> None:
            await asyncio.sleep(0)
            seen.put(job.parent_results)

        handlers.add("children", child)
    else:
        handlers.add(
            "children", lambda job, cursor: seen.put(job.parent_results), transactional=True
        )
    client.configure_queue("parents", retain_results=3600)

    start_worker(handlers)
    first, second = (client.push("parents", {}) for _ in range(2))
    assert first is not None and second is not None
    client.push("children", {}, depends_on=[second, first])

    assert list(seen.get(timeout=15).items()) == [
        (second, {"from": second}),
        (first, {"from": first}),
    ]


def test_a_job_without_parents_is_handed_over_as_claimed(
    start_worker: StartWorker, client: QueueClient
) -> None:
    seen: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()
    handlers.add("plain", lambda job: seen.put((job.depends_on, job.parent_results)))

    start_worker(handlers)
    client.push("plain", {})

    assert seen.get(timeout=15) == ((), None)
