"""The worker registry's records: a registered worker and a job it runs."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from postkit.queue.records.mapping import _RecordMapping


@dataclasses.dataclass(frozen=True, eq=True)
class WorkerInfo(_RecordMapping):
    """One registered worker (or ``postkit tick``) of a namespace, as it last reported."""

    worker_id: str
    kind: str
    """'worker' (runs jobs) or 'ticker' (``postkit tick``: maintenance only)."""
    host: str
    pid: int
    queues: list[str]
    concurrency: int
    version: str
    """The Postkit version it runs."""
    heartbeat_interval: float
    """Seconds between its heartbeats."""
    started_at: datetime
    heartbeat_at: datetime
    """Its last heartbeat, by the queue's clock."""
    lost: bool
    """Its last heartbeat is older than three heartbeat intervals: it was killed or cut off
    (a clean stop deregisters)."""


@dataclasses.dataclass(frozen=True, eq=True)
class RunningJob(_RecordMapping):
    """A job a worker runs now (see ``QueueClient.running_jobs``)."""

    id: int
    queue: str
    worker_id: str | None
    """The worker that claimed it."""
    attempts: int
    """Claims so far, this one included."""
    max_attempts: int
    claimed_at: datetime
    visible_until: datetime
    """The claim's deadline: after it, tick_timeouts may return the job to the queue."""
    running_for: timedelta
    """How long ago it was claimed, by the queue's clock."""
