"""How a settled job ends, in the worker's words: the settle call for each action, and the
counter, log event and line of each :class:`~postkit.queue.Outcome` a settle has (completed,
retried, dead_lettered, stale). The outcomes are the SDK's enum; this module only maps them.
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from postkit.errors import PermanentError, RetryLater
from postkit.queue import Job, Outcome, QueueClient
from postkit.worker.stats import WorkerStats

if TYPE_CHECKING:
    from postkit.worker.metrics import Recorder

logger = logging.getLogger("postkit.worker")

_TRACEBACK_FRAMES = 5

_COUNTERS = {
    Outcome.COMPLETED: "completed",
    Outcome.RETRIED: "retried",
    Outcome.DEAD_LETTERED: "dead_lettered",
    Outcome.STALE: "stale",
}
SETTLED_OUTCOMES = tuple(_COUNTERS)
"""The outcomes a worker's settle has (a rescue is the maintenance's)."""
_MESSAGES = {
    Outcome.COMPLETED: "completed job %d in %.1f ms",
    Outcome.RETRIED: "job %d failed after %.1f ms and is retried ({error})",
    Outcome.DEAD_LETTERED: "dead-lettered job %d after %.1f ms ({error})",
    Outcome.STALE: "job %d finished after %.1f ms but its claim was stale: not settled",
}


SettleAction = Literal["ack", "nack", "fail"]
"""How the worker settles a job whose handler ended: it succeeded, it may be retried, or never."""


@dataclass(frozen=True)
class Settlement:
    """How to settle a job whose handler raised: the action, the error for the job's history,
    and the retry's backoff in seconds (None: the queue's)."""

    action: SettleAction
    error: str
    backoff: float | None = None


def settlement_of(error: BaseException) -> Settlement:
    """The worker's rule for a handler that raised ``error``: :class:`PermanentError` fails
    the job into the dead-letter queue, :class:`RetryLater` nacks it with the delay it names,
    and anything else nacks it with the queue's backoff (each with :func:`error_summary`)."""
    if isinstance(error, PermanentError):
        return Settlement("fail", error_summary(error))
    if isinstance(error, RetryLater):
        delay = error.delay
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
        return Settlement("nack", error_summary(error), seconds)
    return Settlement("nack", error_summary(error))


def settle_call(
    client: QueueClient, job: Job, action: SettleAction, error: str | None, backoff: float | None
) -> Outcome:
    """Ack, nack or fail ``job``; return the outcome."""
    if action == "ack":
        return Outcome.COMPLETED if client.ack(job) else Outcome.STALE
    if action == "fail":
        return Outcome.DEAD_LETTERED if client.fail(job, error=error) else Outcome.STALE
    return Outcome(client.nack_outcome(job, error=error, backoff=backoff).value)


def error_summary(error: BaseException) -> str:
    """'Type: message' and the last frames of the traceback, for the job's error history."""
    frames = traceback.format_tb(error.__traceback__)[-_TRACEBACK_FRAMES:]
    return f"{type(error).__name__}: {error}\n" + "".join(frames)


def job_fields(job: Job, event: str, **more: Any) -> dict[str, Any]:
    """The structured fields of a log line about ``job``."""
    return {"event": event, "job_id": job.id, "queue": job.queue, "attempt": job.attempts, **more}


class OutcomeLog:
    """Counts each settled job in the worker's stats and its metrics, and logs how it ended.
    Thread-safe."""

    def __init__(self, stats: WorkerStats, metrics: Recorder) -> None:
        self.stats = stats
        self.metrics = metrics
        self._lock = threading.Lock()

    def record(self, job: Job, outcome: Outcome, started: float, error: str | None = None) -> None:
        """``job``, whose handler started at ``started`` (time.monotonic()), ended so."""
        milliseconds = (time.monotonic() - started) * 1000
        counter = _COUNTERS[outcome]
        self.metrics.settled(job.queue, outcome)
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + 1)
        # The error text is the job's: it goes into the message as text, never as a format.
        message = _MESSAGES[outcome].replace(
            "{error}", (error or "").split("\n", 1)[0].replace("%", "%%")
        )
        logger.log(
            logging.WARNING if outcome is Outcome.STALE else logging.INFO,
            message,
            job.id,
            milliseconds,
            extra=job_fields(job, outcome.value, duration_ms=round(milliseconds, 3)),
        )

    def record_acks(self, acks: list[tuple[Job, float]], acked: set[int]) -> None:
        """A batched ack settled the jobs of ``acks`` whose ids are in ``acked``; the others'
        claims were stale."""
        self.metrics.acked(acks, acked)
        with self._lock:
            self.stats.completed += len(acked)
        for job, started in acks:
            if job.id not in acked:
                self.record(job, Outcome.STALE, started)
            elif logger.isEnabledFor(logging.INFO):
                milliseconds = (time.monotonic() - started) * 1000
                logger.info(
                    _MESSAGES[Outcome.COMPLETED],
                    job.id,
                    milliseconds,
                    extra=job_fields(
                        job, Outcome.COMPLETED.value, duration_ms=round(milliseconds, 3)
                    ),
                )

    def count(self, counter: str, number: int = 1) -> None:
        """Add ``number`` to the stats' ``counter`` (``released``, ``rescued``)."""
        with self._lock:
            setattr(self.stats, counter, getattr(self.stats, counter) + number)


__all__ = [
    "SETTLED_OUTCOMES",
    "OutcomeLog",
    "SettleAction",
    "Settlement",
    "error_summary",
    "job_fields",
    "settle_call",
    "settlement_of",
]
