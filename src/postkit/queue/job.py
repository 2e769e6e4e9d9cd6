"""What the SDK returns: jobs, dead letters and queue policies, each a read-only mapping with a
typed attribute view (``job["payload"]`` and ``job.payload`` are the same value)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any


class _RecordMapping(Mapping[str, Any]):
    """Lets a frozen dataclass be read as a mapping of its fields."""

    def __getitem__(self, key: str) -> Any:
        if key not in self._field_names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._field_names())

    def __len__(self) -> int:
        return len(self._field_names())

    @classmethod
    def _field_names(cls) -> tuple[str, ...]:
        return tuple(field.name for field in dataclasses.fields(cls))  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True, eq=True)
class Job(_RecordMapping):
    """A job as ``pull`` claimed it, or as ``get_job`` found it.

    ``claim_token`` is the fence of the current claim: pass the whole ``Job`` (or its
    ``claim_token``) to ack, nack, fail and extend_visibility, and a stale attempt can never
    settle a newer one, even one taken under the same worker_id.
    """

    id: int
    queue: str
    payload: Any
    attempts: int
    """Claims so far, this one included: every pull counts an attempt."""
    max_attempts: int
    worker_id: str | None
    claim_token: str | None
    visible_until: datetime | None
    """The claim's deadline: after it, tick_timeouts may return the job to the queue."""
    state: str
    """'pending' (waiting for run_at), 'running' (claimed) or 'dead' (in the dead-letter queue)."""
    priority: int
    run_at: datetime | None
    namespace: str
    unique_key: str | None
    claimed_at: datetime | None
    errors: tuple[Mapping[str, Any], ...]
    """One entry per failed attempt, oldest first: attempt, kind, error, worker_id, at."""
    created_at: datetime
    failed_at: datetime | None = None


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


@dataclasses.dataclass(frozen=True, eq=True)
class QueuePolicy(_RecordMapping):
    """The defaults a queue's jobs get when push and pull do not say otherwise."""

    max_attempts: int
    visibility_timeout: float
    """Seconds."""
    backoff_base: float
    """Seconds: the first retry comes after between one and two times this."""
    backoff_cap: float
    """Seconds: the longest a retry waits."""


class NackOutcome(str, enum.Enum):
    """What a nack did."""

    RETRIED = "retried"
    """The job is pending again and runs after its backoff."""
    DEAD_LETTERED = "dead_lettered"
    """Its attempts were spent: the job moved to the dead-letter queue."""
    STALE = "stale"
    """The caller no longer held the claim; nothing changed."""
