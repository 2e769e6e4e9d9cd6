"""The jobs a worker holds claimed, shared by its threads: the fetcher adds them, the executor
runs and settles them, the heartbeat extends their claims.

Everything here is read and changed under one condition variable, ``lock``; its waiters are
the fetcher (a slot freed, acks to send, a stop) and the shutdown's drain.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import time
from typing import TYPE_CHECKING

from postkit.queue import Job
from postkit.queue.protocol import CheckedResult

if TYPE_CHECKING:
    from postkit.worker.metrics import Recorder


def claim_seconds(job: Job) -> float:
    """How long ``job``'s claim lasts: the visibility timeout it was claimed with.

    Raises:
        ValueError: ``job`` is not a claimed job (pull always returns its claim's times).
    """
    if job.visible_until is None or job.claimed_at is None:
        raise ValueError(f"job {job.id} carries no claim")
    return (job.visible_until - job.claimed_at).total_seconds()


class Claims:
    """The claimed jobs and where each one stands. See the module docstring."""

    def __init__(self, metrics: Recorder) -> None:
        self.metrics = metrics
        """Told how long each handler ran, when it returns or raises."""
        self.lock = threading.Condition()
        self.in_flight: dict[int, Job] = {}
        """Jobs claimed and not yet settled: running, or waiting for a handler slot."""
        self.settling: set[int] = set()
        """Jobs whose settle (an ack in a transactional handler's transaction, a nack, a
        fail) is under way: the heartbeat leaves them alone, since their claim is about to
        end."""
        self.started: dict[int, tuple[float, float]] = {}
        """Jobs whose handler runs: when it started and when it times out (monotonic)."""
        self.timed_out: set[int] = set()
        """Jobs that ran past their handler's timeout and were nacked, their handler still
        running: whatever it returns is dropped."""
        self.async_tasks: dict[int, concurrent.futures.Future[None]] = {}
        self.beats: dict[int, float] = {}
        """When each claimed job's next heartbeat is due (monotonic), by job id."""
        self.heartbeat_wake = threading.Event()
        self.slot_freed = False
        """Set when a job leaves ``in_flight`` without a batched ack (a transactional handler,
        a nack, a fail): its slot is free, and the fetcher wakes to fill it."""
        self.finished: list[tuple[Job, float]] = []
        """Jobs whose handler succeeded, waiting for the next batched ack, with their start
        time."""
        self.settled_total = 0
        """How many claimed jobs have left ``in_flight`` since the worker started: the settle
        rate the adaptive prefetch follows (``postkit.worker.prefetch``)."""
        self.results: dict[int, CheckedResult] = {}
        """What the handlers of finished jobs returned, checked, by job id: sent with their
        batched ack, and forgotten once it went through."""

    def add(self, job: Job) -> None:
        """``job`` was just claimed: it holds a slot, and its first heartbeat is due a third
        of the way through its claim."""
        with self.lock:
            self.in_flight[job.id] = job
            self.beats[job.id] = time.monotonic() + claim_seconds(job) / 3
        self.heartbeat_wake.set()

    def take_finished(self) -> list[tuple[Job, float]]:
        """The jobs waiting for a batched ack, handed over to send it."""
        with self.lock:
            acks, self.finished = self.finished, []
            self.slot_freed = False
            return acks

    def return_finished(self, acks: list[tuple[Job, float]]) -> None:
        """The batched ack of ``acks`` failed (nothing was acknowledged): send them next time."""
        with self.lock:
            self.finished[:0] = acks

    def start(self, job: Job, timeout: float | None) -> float | None:
        """The handler of ``job`` starts now, unless the job was released meanwhile (a stop):
        then None. From now on its ``timeout`` (seconds, None: none) runs."""
        with self.lock:
            if job.id not in self.in_flight:
                return None
            now = time.monotonic()
            self.started[job.id] = (now, now + timeout if timeout is not None else math.inf)
        self.heartbeat_wake.set()  # it also watches the handlers' timeouts
        return now

    def claim_outcome(self, job: Job) -> bool:
        """The handler of ``job`` returned or raised: it may be settled, unless it had
        already run past its timeout (then the job was nacked as timed out, and this returns
        False)."""
        with self.lock:
            if job.id in self.timed_out:
                return False
            started = self.started.pop(job.id, None)
            self.settling.add(job.id)
        if started is not None:
            self.metrics.handler_ended(job.queue, started[0])
        return True

    def begin_settle(self, job: Job) -> None:
        """From now on the job's claim may end at any moment: stop its heartbeats."""
        with self.lock:
            self.settling.add(job.id)

    def complete(self, job: Job, started: float, result: CheckedResult | None = None) -> None:
        """The handler succeeded: free the slot and queue the job, with its ``result`` (None:
        none), for the next batched ack."""
        with self.lock:
            self._forget(job)
            self.finished.append((job, started))
            if result is not None:
                self.results[job.id] = result
            self.lock.notify_all()

    def results_of(self, acks: list[tuple[Job, float]]) -> list[CheckedResult | None] | None:
        """The results to send with the batched ack of ``acks``, one per job; None when none
        of them has one."""
        with self.lock:
            if not self.results:
                return None
            found = [self.results.get(job.id) for job, _ in acks]
        return found if any(result is not None for result in found) else None

    def forget_results(self, acks: list[tuple[Job, float]]) -> None:
        """The batched ack of ``acks`` went through (each job acked, or its claim stale)."""
        with self.lock:
            if self.results:
                for job, _ in acks:
                    self.results.pop(job.id, None)

    def finish(self, job: Job) -> None:
        """The job was settled (or given up on) by its own thread: free its slot and wake the
        fetcher to fill it."""
        with self.lock:
            self._forget(job)
            self.slot_freed = True
            self.lock.notify_all()

    def drop_late_outcome(self, job: Job) -> None:
        """The handler of a job nacked as timed out has ended."""
        with self.lock:
            self.timed_out.discard(job.id)

    def _forget(self, job: Job) -> None:
        if self.in_flight.pop(job.id, None) is not None:
            self.settled_total += 1
        self.settling.discard(job.id)
        self.async_tasks.pop(job.id, None)


__all__ = ["Claims", "claim_seconds"]
