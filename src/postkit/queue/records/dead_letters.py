"""The dead letters' records: a dead letter, a search's page, a redrive and a job's lineage."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from postkit.queue.records.mapping import _RecordMapping


@dataclasses.dataclass(frozen=True, eq=True)
class DeadLetter(_RecordMapping):
    """A job the queue gave up on, kept with its payload and every attempt's error."""

    job_id: int
    queue: str
    payload: Any
    error: str | None
    """The last error."""
    errors: tuple[Mapping[str, Any], ...]
    """Every attempt's error, oldest first."""
    reason: str
    """'failed' (fail was called), 'attempts_exhausted' (nack with none left) or 'timed_out'."""
    attempts: int
    max_attempts: int
    worker_id: str | None
    """The last worker that held the job."""
    priority: int
    unique_key: str | None
    namespace: str
    created_at: datetime
    failed_at: datetime
    expires_at: datetime
    """When retention prunes it (the queue's retain_dead after failed_at)."""
    redriven_job_id: int | None
    """The job it was retried as, once an operator redrove it."""
    redriven_at: datetime | None
    payload_error: str | None = None
    """None when ``payload`` was decoded; else why Python could not decode it (``payload`` is
    then None; redrive still copies the stored payload as it is)."""
    trace_context: Mapping[str, str] | None = None
    """The job's trace context (see :attr:`Job.trace_context`); redrive copies it to the new
    job, so the retried job's runs link to the push that started it."""


class DeadLetterPosition(Protocol):
    """Where a page of dead letters ends: a :class:`DeadLetter`, or anything else with its
    ``failed_at`` and ``job_id`` (a cursor a web page sent back)."""

    @property
    def failed_at(self) -> datetime: ...

    @property
    def job_id(self) -> int: ...


@dataclasses.dataclass(frozen=True, eq=True)
class DeadLetterSearch(_RecordMapping):
    """One page of ``QueueClient.search_dead_letters``: the matches, and where to search on."""

    letters: list[DeadLetter]
    """The dead letters that match, newest first."""
    next_after: DeadLetter | None
    """Pass as ``after`` to search on: the last match when the page is full, else the last dead
    letter the search read when it stopped at its bound (``cut``); None when nothing older
    matches."""
    cut: bool
    """The search stopped after reading ``scan_limit`` dead letters, with fewer matches than the
    page holds: older ones may match too."""


@dataclasses.dataclass(frozen=True, eq=True)
class LineageStep(_RecordMapping):
    """One job of a chain of redrives (see ``QueueClient.job_lineage``), and where it is now."""

    job_id: int
    queue: str | None
    """None when the job is gone without a trace."""
    state: str | None
    """'pending', 'scheduled' or 'running' while it is live; 'dead' as a dead letter (retried
    once ``redriven_job_id`` is set); 'completed' when its queue archives completed jobs. None
    when it left without a trace: completed in a queue that keeps no archive, cancelled,
    purged, or pruned."""
    attempts: int | None
    created_at: datetime | None
    failed_at: datetime | None
    """When it was dead-lettered."""
    error: str | None
    """The dead letter's last error, or the live job's last failed attempt's."""
    redriven_job_id: int | None
    """The job its dead letter was retried as: the next step."""
    redriven_at: datetime | None


@dataclasses.dataclass(frozen=True, eq=True)
class Redriven(_RecordMapping):
    """One dead letter retried (or, in a dry run, that would be)."""

    job_id: int
    queue: str
    """The queue it goes (or would go) to."""
    new_job_id: int | None
    """The new job; None in a dry run."""
