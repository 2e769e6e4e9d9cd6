"""A handler run by a worker reports its progress with postkit.worker.report_progress, which
writes on the job's own claim."""

from __future__ import annotations

import asyncio
import queue as stdlib_queue
import threading
from typing import Any

import pytest

from postkit.queue import Job, QueueClient
from postkit.worker import Handlers, report_progress
from tests.signals import wait_until
from tests.worker.conftest import StartWorker


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_running_handlers_progress_is_visible_while_it_runs(
    start_worker: StartWorker, client: QueueClient, kind: str
) -> None:
    finish = threading.Event()
    reported: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()
    handlers = Handlers()
    if kind == "sync":

        def slow(job: Job) -> None:
            reported.put(report_progress(0.5, note="halfway"))
            finish.wait(15)

        handlers.add("slow", slow)
    else:

        async def slow_async(job: Job) -> None:
            reported.put(report_progress(0.5, note="halfway"))
            while not finish.is_set():
                await asyncio.sleep(0.01)

        handlers.add("slow", slow_async)

    start_worker(handlers)
    job_id = client.push("slow", {})
    assert job_id is not None
    try:
        assert reported.get(timeout=15) is True
        job = client.get_job(job_id)
        assert job is not None and (job.progress, job.progress_note) == (0.5, "halfway")
    finally:
        finish.set()
    wait_until(lambda: client.get_job(job_id) is None, f"job {job_id} to complete")


def test_report_progress_outside_a_handler_says_where_it_works() -> None:
    with pytest.raises(RuntimeError, match="from the handler"):
        report_progress(0.5)
