"""What a handler returned, as its job's result: checked on the handler's own thread, kept when
it can be one, and said once per queue when it cannot, or when the queue keeps no results."""

from __future__ import annotations

import logging
import threading

import psycopg
import psycopg_pool

from postkit import errors
from postkit.queue import Job, protocol
from postkit.queue.protocol import CheckedResult
from postkit.worker.outcomes import job_fields
from postkit.worker.pool import Connections

logger = logging.getLogger("postkit.worker")


class Results:
    """A worker's results: each handler's return value as the result its ack sends."""

    def __init__(self, pool: Connections) -> None:
        self._pool = pool
        # The queues whose handlers returned a value that cannot be kept, logged at WARNING
        # once, and those whose policy was read for whether they keep results at all.
        self._unkept: set[str] = set()
        self._checked: set[str] = set()
        self._lock = threading.Lock()

    def result_of(self, job: Job, value: object) -> CheckedResult | None:
        """What ``job``'s handler returned, as the result its ack sends: None for None, and
        for a value that cannot be a result (logged; see the module docstring)."""
        if value is None:
            return None
        with self._lock:
            unchecked = job.queue not in self._checked
            self._checked.add(job.queue)
        if unchecked:
            self._warn_if_discarded(job)
        try:
            return protocol.checked_result(value)
        except Exception as exc:  # an InvalidResultError, or whatever a strange value raises
            with self._lock:
                first = job.queue not in self._unkept
                self._unkept.add(job.queue)
            logger.log(
                logging.WARNING if first else logging.DEBUG,
                "job %d returned a value that cannot be its result (%s): it is completed without "
                "one; return None or a JSON value of at most 1 MiB%s",
                job.id,
                exc,
                " (further ones of this queue are logged at debug level)" if first else "",
                extra=job_fields(job, "result_dropped"),
            )
            return None

    def _warn_if_discarded(self, job: Job) -> None:
        """Log at WARNING when ``job``'s queue keeps no results: the SQL module then drops
        what its handlers return, which would otherwise go unnoticed until someone waits for
        a result that never comes."""
        try:
            with self._pool.connection() as connection:
                policy = self._pool.client_on(connection).queue_policy(job.queue)
        except (psycopg.Error, psycopg_pool.PoolTimeout, errors.PostkitError) as exc:
            logger.debug("could not read queue %s's policy: %s", job.queue, exc)
            return
        if policy.retain_results is None:
            logger.warning(
                "queue %s keeps no results, so what its handlers return is discarded (job %d "
                "returned a value): keep them with @app.task(..., retain_results=...) or "
                "`postkit queue configure %s --retain-results 1d`, or return None",
                job.queue,
                job.id,
                job.queue,
                extra=job_fields(job, "results_discarded"),
            )


__all__ = ["Results"]
