"""Heartbeats: every third of its visibility timeout the claim of each claimed job is
extended, so a long healthy job is never rescued while a dead worker's job expires within
one timeout. The same thread watches the handlers' timeouts: a handler that runs past its own
has its attempt counted as timed out."""

from __future__ import annotations

import functools
import logging
import threading
import time

import psycopg
import psycopg_pool

from postkit.queue import Job, QueueClient
from postkit.worker.claims import Claims, claim_seconds
from postkit.worker.job_executor import JobExecutor
from postkit.worker.outcomes import job_fields
from postkit.worker.pool import WorkerPool

logger = logging.getLogger("postkit.worker")


class Heartbeat:
    """Extends claims and expires overdue handlers until ``closed`` is set. See the module
    docstring."""

    def __init__(
        self,
        claims: Claims,
        executor: JobExecutor,
        pool: WorkerPool,
        *,
        poll_interval: float,
        closed: threading.Event,
    ) -> None:
        self.claims = claims
        self.executor = executor
        self.pool = pool
        self.poll_interval = poll_interval
        self._closed = closed

    def wake(self) -> None:
        """Cut the current wait short (to end the loop once ``closed`` is set)."""
        self.claims.wake_heartbeat()

    def run(self) -> None:
        """Extend each claim a third of the way through its own timeout, the one its claim
        was made with (the queue's policy, or the worker's override). A job that is being
        settled is left alone: its claim ends with the settle."""
        claims = self.claims
        while not self._closed.is_set():
            self._expire_overdue_handlers()
            due_jobs, wait = claims.due_beats(time.monotonic(), self.poll_interval)
            if not due_jobs:
                claims.wait_for_heartbeat(wait)
                continue
            try:
                lost = self.pool.run(functools.partial(_extend_claims, jobs=due_jobs))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                if self._closed.is_set():
                    return
                logger.warning("heartbeat failed (%s)", exc, extra={"event": "heartbeat_error"})
                # Not a growing backoff: the next try must come well within the shortest claim's
                # timeout, or the job is lost while the database is merely slow.
                self._closed.wait(min(1.0, min(claim_seconds(job) for job in due_jobs) / 6))
                continue
            for job in claims.extended(due_jobs, lost, time.monotonic()):
                self.executor.lose(job)

    def _expire_overdue_handlers(self) -> None:
        """Count the attempt of each job whose handler ran past its timeout as timed out: nack
        it (the heartbeats stop), cancel an async handler, and give a synchronous one's slot to
        a new thread, since the handler's own thread cannot be stopped."""
        claims = self.claims
        for job, started in claims.expire_overdue(time.monotonic()):
            spec = self.executor.handlers[job.queue]
            limit = self.executor.timeout_of(spec)
            logger.warning(
                "job %d ran past its handler timeout (%gs): the attempt counts as timed out%s",
                job.id,
                limit,
                "" if spec.is_async else "; its handler thread runs on, its outcome dropped",
                extra=job_fields(job, "handler_timeout"),
            )
            if not spec.is_async:
                self.executor.start_handler_thread()
            if spec.holds_pool_connection:
                # The late handler keeps its pooled connection, in its open transaction, until
                # it returns: the pool grows by one meanwhile, so its slot's new handler and the
                # worker's own calls still get connections.
                self.pool.resize(+1)
            error = f"HandlerTimeout: the handler ran past its {limit:g}s limit"
            try:
                self.executor.settle(job, "nack", started, error=error)
            finally:
                claims.finish(job)


def _extend_claims(client: QueueClient, *, jobs: list[Job]) -> set[int]:
    """Extend each claim by its own timeout; return the ids of the jobs whose claim was lost."""
    return {
        job.id for job in jobs if not client.extend_visibility(job, extension=claim_seconds(job))
    }


__all__ = ["Heartbeat"]
