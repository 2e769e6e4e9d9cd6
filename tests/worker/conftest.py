"""Fixtures the worker tests share: an autocommit queue client, and workers on threads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from postkit.queue import QueueClient
from postkit.worker import Worker
from tests.threads import QUIET, worker_threads

StartWorker = Callable[..., Worker]


@pytest.fixture
def client(connect: Callable[..., psycopg.Connection[Any]], namespace: str) -> QueueClient:
    """An autocommit client of the test's namespace: each push commits at once."""
    return QueueClient(connect(autocommit=True).cursor(), namespace=namespace)


@pytest.fixture
def start_worker(dsn: str, namespace: str) -> Iterator[StartWorker]:
    """Start workers of the test's namespace on threads, the fallback poll and the tick far
    longer than any test waits; each is stopped and must have shut down after the test."""
    with worker_threads() as run:
        yield lambda handlers, **options: run(
            Worker(dsn, handlers, namespace=namespace, **{**QUIET, **options})
        )
