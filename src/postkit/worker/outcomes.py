"""How a settled job ends, in the worker's words: the settle call for each action, the counter
each outcome adds to, and the line it logs.

An outcome is a string: ``"ack"``, or a :class:`~postkit.queue.NackOutcome` value
(``"retried"``, ``"dead_lettered"``, ``"stale"``). Every mapping from outcomes to counters and
messages lives here, so the vocabulary can become one SDK enum in one edit.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from typing import Any

from postkit.queue import Job, QueueClient
from postkit.worker.stats import WorkerStats

logger = logging.getLogger("postkit.worker")

_TRACEBACK_FRAMES = 5

_COUNTERS = {
    "ack": "acked",
    "retried": "retried",
    "dead_lettered": "dead_lettered",
    "stale": "stale",
}
_MESSAGES = {
    "ack": "acked job %d in %.1f ms",
    "retried": "nacked job %d after %.1f ms: will retry ({error})",
    "dead_lettered": "dead-lettered job %d after %.1f ms ({error})",
    "stale": "job %d finished after %.1f ms but its claim was stale: not settled",
}


def settle_call(
    client: QueueClient, job: Job, action: str, error: str | None, backoff: float | None
) -> str:
    """Ack, nack or fail ``job`` (``action``: "ack", "nack" or "fail"); return the outcome."""
    if action == "ack":
        return "ack" if client.ack(job) else "stale"
    if action == "fail":
        return "dead_lettered" if client.fail(job, error=error) else "stale"
    return client.nack_outcome(job, error=error, backoff=backoff).value


def error_summary(error: BaseException) -> str:
    """'Type: message' and the last frames of the traceback, for the job's error history."""
    frames = traceback.format_tb(error.__traceback__)[-_TRACEBACK_FRAMES:]
    return f"{type(error).__name__}: {error}\n" + "".join(frames)


def job_fields(job: Job, event: str, **more: Any) -> dict[str, Any]:
    """The structured fields of a log line about ``job``."""
    return {"event": event, "job_id": job.id, "queue": job.queue, "attempt": job.attempts, **more}


class Outcomes:
    """Counts each settled job in the worker's stats and logs how it ended. Thread-safe."""

    def __init__(self, stats: WorkerStats) -> None:
        self.stats = stats
        self._lock = threading.Lock()

    def record(self, job: Job, outcome: str, started: float, error: str | None = None) -> None:
        """``job``, whose handler started at ``started`` (time.monotonic()), ended so."""
        milliseconds = (time.monotonic() - started) * 1000
        counter = _COUNTERS[outcome]
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        # The error text is the job's: it goes into the message as text, never as a format.
        message = _MESSAGES[outcome].replace(
            "{error}", (error or "").split("\n", 1)[0].replace("%", "%%")
        )
        logger.log(
            logging.WARNING if outcome == "stale" else logging.INFO,
            message,
            job.id,
            milliseconds,
            extra=job_fields(job, outcome, duration_ms=round(milliseconds, 3)),
        )

    def record_acks(self, acks: list[tuple[Job, float]], acked: set[int]) -> None:
        """A batched ack settled the jobs of ``acks`` whose ids are in ``acked``; the others'
        claims were stale."""
        with self._lock:
            self.stats.acked += len(acked)
        for job, started in acks:
            if job.id not in acked:
                self.record(job, "stale", started)
            elif logger.isEnabledFor(logging.INFO):
                milliseconds = (time.monotonic() - started) * 1000
                logger.info(
                    _MESSAGES["ack"],
                    job.id,
                    milliseconds,
                    extra=job_fields(job, "ack", duration_ms=round(milliseconds, 3)),
                )

    def count(self, counter: str, number: int = 1) -> None:
        """Add ``number`` to the stats' ``counter`` (``released``, ``reclaimed``)."""
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + number)


__all__ = ["Outcomes", "error_summary", "job_fields", "settle_call"]
