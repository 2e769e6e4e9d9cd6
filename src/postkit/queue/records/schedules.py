"""The schedules' records: a schedule, its last runs, and what a tick fired or found broken."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from postkit.queue.records.mapping import _RecordMapping


@dataclasses.dataclass(frozen=True, eq=True)
class Schedule(_RecordMapping):
    """A recurring job: a cron expression in a time zone, or a fixed interval."""

    name: str
    queue: str
    payload: Any
    cron: str | None
    timezone: str
    every: timedelta | None
    priority: int
    max_attempts: int | None
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    namespace: str
    created_at: datetime
    updated_at: datetime
    broken_at: datetime | None = None
    """When a tick could not compute the schedule's next run (a cron expression or time zone
    this Python cannot use); a broken schedule does not fire until it is saved again."""
    broken_reason: str | None = None
    """Why it is broken."""
    payload_error: str | None = None
    """None when ``payload`` was decoded; else why Python could not decode it (``payload`` is
    then None; the schedule still pushes the stored payload as it is)."""


@dataclasses.dataclass(frozen=True, eq=True)
class ScheduleRun(_RecordMapping):
    """A schedule's last run, and what became of the job it pushed."""

    name: str
    last_run_at: datetime | None
    """None: it never fired."""
    last_job_id: int | None
    last_job_state: str | None
    """'pending', 'scheduled' or 'running' while the job is live; 'dead' once dead-lettered;
    'completed' when its queue archives completed jobs (``retain_completed``). None when the
    schedule never fired, or when the job left without a trace: completed in a queue that
    keeps no archive (the usual end), cancelled, purged, or pruned."""
    attempts: int | None
    finished_at: datetime | None
    """When it was dead-lettered or completed."""
    error: str | None
    """The last error: the dead letter's, or the live job's last failed attempt's."""


@dataclasses.dataclass(frozen=True, eq=True)
class Fired(_RecordMapping):
    """One schedule run fired by ``tick_schedules``."""

    name: str
    job_id: int
    due_at: datetime
    next_run_at: datetime


@dataclasses.dataclass(frozen=True, eq=True)
class BrokenSchedule(_RecordMapping):
    """A due schedule that ``tick_schedules`` marked broken instead of firing: its next run
    could not be computed (a cron expression or time zone this Python cannot use). It stays
    broken, and fires no more, until it is saved again."""

    name: str
    due_at: datetime
    reason: str
