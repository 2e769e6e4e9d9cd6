"""Fixtures for typed tasks: an App in the test's namespace, a client to look at its jobs, and
workers of an App run in-process (``App.worker(...).run()`` on a thread, stopped after the
test)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from postkit.queue import Job, QueueClient
from postkit.tasks import App
from postkit.worker import Worker
from tests.threads import QUIET, worker_threads

StartWorker = Callable[..., Worker]


@pytest.fixture
def app(namespace: str) -> App:
    return App(namespace=namespace)


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client in the test's namespace: reads see the latest state."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def job_of(client: QueueClient) -> Callable[[int | None], Job]:
    """The job of an id a push returned."""

    def _job(job_id: int | None) -> Job:
        assert job_id is not None, "the push was deduplicated"
        job = client.get_job(job_id)
        assert job is not None, f"job {job_id} is gone"
        return job

    return _job


@pytest.fixture
def start_worker(dsn: str, namespace: str) -> Iterator[StartWorker]:
    """Start a worker of an App on a thread (``app.worker(dsn, **options)``); each is
    stopped and must have shut down after the test. The fallback poll and the tick are far
    longer than any wait here, so a job that runs promptly was claimed on a notification."""
    worker_dsn = psycopg.conninfo.make_conninfo(dsn, application_name=f"pk-{namespace}")
    with worker_threads() as run:
        yield lambda app, **options: run(app.worker(worker_dsn, **{**QUIET, **options}))
