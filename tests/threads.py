"""Workers on threads of the test process: started with the options tests share, stopped after
the test, each of which must have shut down."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

QUIET: dict[str, Any] = {"poll_interval": 30.0, "tick_interval": 60.0, "grace_period": 2.0}
"""The fallback poll and the tick far longer than any test waits, so a job that runs promptly
was claimed on a notification; a short grace period, so a stop does not keep the test."""


class Runnable(Protocol):
    """A Worker or a SharedWorker: what runs until stopped."""

    def run(self) -> None: ...

    def stop(self) -> None: ...


W = TypeVar("W", bound=Runnable)


@contextlib.contextmanager
def worker_threads() -> Iterator[Callable[[W], W]]:
    """A function that runs a Worker (or a SharedWorker) on a thread of its own and returns
    it. When the block ends every worker is stopped, and each must have shut down within
    30 s."""
    running: list[tuple[Runnable, threading.Thread]] = []

    def run(worker: W) -> W:
        thread = threading.Thread(target=worker.run, name="test-worker", daemon=True)
        thread.start()
        running.append((worker, thread))
        return worker

    yield run
    for worker, _ in running:
        worker.stop()
    for _, thread in running:
        thread.join(timeout=30)
        assert not thread.is_alive(), "the worker did not shut down within 30 s of stop()"
