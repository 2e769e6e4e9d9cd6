"""A job's records: :class:`Job`, :class:`JobResult` and :class:`JobCursor`, and the two
vocabularies, the job states and the outcomes, each defined once here and kept in step with the
SQL module's enum types (docs/concepts.md is their glossary)."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from postkit import errors
from postkit.queue.records.mapping import _RecordMapping


class JobState(str, enum.Enum):
    """Where a job is in its life, as the SQL module names it (``postkit_queue.job_state``)."""

    PENDING = "pending"
    """Waiting in its queue; ready once its run_at has come (a listing of 'pending' jobs shows
    only the ready ones)."""
    SCHEDULED = "scheduled"
    """Pending with a run_at still to come: delayed, or retrying after a backoff."""
    RUNNING = "running"
    """Claimed by a worker, until it settles the job or its claim times out."""
    DEAD = "dead"
    """In the dead-letter queue."""
    WAITING = "waiting"
    """Pushed with parents (``depends_on``) that have not all completed: never claimed until
    the last one's ack makes it pending."""
    CANCELLED = "cancelled"
    """Cancelled before it completed (pending, waiting or running): by an operator, or because
    a parent was dead-lettered, cancelled or purged (``JobResult.reason`` says which)."""


class Outcome(str, enum.Enum):
    """What settling or rescuing a job did, as the SQL module names it
    (``postkit_queue.outcome``, and docs/concepts.md): the outcomes the statistics count, and
    what a nack or a rescue returns."""

    COMPLETED = "completed"
    """Acknowledged: the job succeeded and left the queue."""
    RETRIED = "retried"
    """A nack with attempts left: scheduled again, to run after its backoff."""
    RESCUED = "rescued"
    """An expired claim with attempts left, pending again at once (tick_timeouts)."""
    DEAD_LETTERED = "dead_lettered"
    """Moved to the dead-letter queue: failed, out of attempts, or timed out."""
    STALE = "stale"
    """The caller no longer held the claim; nothing changed."""


@dataclasses.dataclass(frozen=True, eq=True)
class Job(_RecordMapping):
    """A job as ``pull`` claimed it, or as ``get_job`` found it.

    ``claim_token`` is the fence of the current claim: pass the whole ``Job`` (or its
    ``claim_token``) to ack, nack, fail and extend_visibility, and a stale attempt can never
    settle a newer one, even one taken under the same worker_id.

    A payload that PostgreSQL stored but Python cannot decode (JSON nested deeper than the
    recursion limit, an integer past Python's 4,300-digit limit) does not make the read
    raise: the job comes back with ``payload`` None and ``payload_error`` saying why. The
    worker runtime dead-letters such a job with that error instead of running its handler.
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
    """A JobState value: 'pending', 'scheduled', 'running', 'waiting', 'dead' or
    'cancelled'. A pull returns 'running' jobs; get_job and jobs return pending ones as
    'pending' whatever their run_at."""
    priority: int
    run_at: datetime | None
    namespace: str
    unique_key: str | None
    claimed_at: datetime | None
    errors: tuple[Mapping[str, Any], ...]
    """One entry per failed attempt, oldest first: attempt, kind, error, worker_id, at."""
    created_at: datetime
    failed_at: datetime | None = None
    payload_error: str | None = None
    """None when ``payload`` was decoded; else why Python could not decode it (``payload`` is
    then None)."""
    trace_context: Mapping[str, str] | None = None
    """The trace context its push recorded (a W3C carrier: ``traceparent``, ``tracestate``),
    which the worker links each run's span to; None when it was pushed outside any trace, or
    when what is stored is not an object of strings (written past the SQL API)."""
    age: timedelta | None = None
    """How long ago the job was created, by the queue's clock when ``jobs`` listed it (so
    ``created_at + age`` is that moment); None from the other calls."""
    group_key: str | None = None
    """The group its push put it in (``push(group_key=...)``), which its queue's group limits
    (``configure_queue(group_concurrency=..., group_ordered=...)``) apply to; None: no group."""
    claim_expired: bool = False
    """True when ``get_job`` found the job running past its claim's deadline, by the
    database's clock: no worker holds it any more (its worker died, or is late with a
    heartbeat), and it stays 'running' until a ``tick_timeouts`` of the namespace (any
    running worker's, or ``postkit tick``) returns it to the queue. False from the other
    calls."""
    depends_on: tuple[int, ...] = ()
    """The parents its push named (``push(depends_on=...)``), without duplicates: the jobs it
    waited for. Empty: none."""
    waiting_on: int | None = None
    """How many of its parents have not completed yet, while it is 'waiting' (``get_job``);
    None otherwise."""
    parent_results: Mapping[int, Any] | None = None
    """The results of its parents, by id, in the order its push named them (None for a parent
    whose queue keeps no results), as the worker hands the job to its handler; None from the
    SDK's calls, where ``parent_results(job_id)`` reads them."""

    progress: float | None = None
    """What its running attempt's handler last reported (``report_progress``): a fraction
    from 0 to 1; None when it reported none (``get_job``; None from the other calls)."""
    progress_note: str | None = None
    """The note of that report, if any."""
    progress_at: datetime | None = None
    """When that report was made, by the queue's clock."""

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Job:
        """The job of ``fields`` (every field without a default, and any of the others), as
        ``Job(**fields)`` makes it, without the generated ``__init__``: a frozen dataclass sets
        each field through ``object.__setattr__``, about 3 us for a job's 27 fields, an eighth
        of what a worker spends per job. The readers of claims use it; tests/test_records.py
        holds it equal to the constructor."""
        job = object.__new__(cls)
        job.__dict__.update(_JOB_DEFAULTS)
        job.__dict__.update(fields)
        return job


_JOB_DEFAULTS = {
    field.name: field.default
    for field in dataclasses.fields(Job)
    if field.default is not dataclasses.MISSING
}


UNFINISHED_STATES = (
    JobState.PENDING.value,
    JobState.SCHEDULED.value,
    JobState.RUNNING.value,
    JobState.WAITING.value,
)
"""The states of a :class:`JobResult` whose job has not finished."""


@dataclasses.dataclass(frozen=True, eq=True)
class JobResult(_RecordMapping):
    """What became of a job (``QueueClient.result``): its result once it completed, the dead
    letter's error once it was dead-lettered, or that it has not finished yet.

    ``state`` is one of:

    - 'pending', 'scheduled', 'running', 'waiting': not finished (``finished`` is False);
    - 'completed': ``value`` is what its handler returned (None when it returned None, or when
      its queue keeps completed jobs but no results, or the value could not be kept);
    - 'dead': dead-lettered, with the dead letter's ``error`` and ``reason``;
    - 'cancelled': cancelled before it completed, with ``reason``: 'cancelled' (by an operator) or
      'parent 17 was dead-lettered' (or cancelled, or purged);
    - 'unknown': nothing is known: never pushed (or in another namespace), completed in a queue
      that keeps neither results nor completed jobs, purged, or its record pruned.
    """

    job_id: int
    state: str
    queue: str | None = None
    """None when the state is 'unknown'."""
    value: Any = None
    """The result of a completed job; None in every other state."""
    error: str | None = None
    """The dead letter's last error."""
    reason: str | None = None
    """Why it was dead-lettered ('failed', 'attempts_exhausted' or 'timed_out') or cancelled
    ('cancelled', or 'parent N was dead-lettered', 'parent N was cancelled', 'parent N was
    purged')."""
    attempts: int | None = None
    """Claims so far (live), or the claims it took (completed, dead)."""
    finished_at: datetime | None = None
    """When it completed, was dead-lettered or was cancelled."""
    expires_at: datetime | None = None
    """When retention prunes the result, the dead letter or the cancelled job."""
    redriven_job_id: int | None = None
    """The job a dead letter was retried as: its result is that job's."""
    value_error: str | None = None
    """None when ``value`` was decoded; else why Python could not decode the stored result
    (``value`` is then None)."""

    @property
    def finished(self) -> bool:
        """The job completed, was dead-lettered or was cancelled: its result will not change
        (but for a redrive, whose new job has a result of its own)."""
        return self.state in ("completed", JobState.DEAD.value, JobState.CANCELLED.value)


@dataclasses.dataclass(frozen=True, eq=True)
class TreeJob(_RecordMapping):
    """One job of a job's tree (``QueueClient.job_tree``): the root, or a job that descends from
    it through ``depends_on``."""

    job_id: int
    depth: int
    """0 for the root, 1 for its children, and so on (a job two paths reach: the nearer)."""
    queue: str | None
    """None when the state is 'unknown' (the root only)."""
    state: str
    """'pending', 'scheduled', 'running' or 'waiting' while it is live; 'completed' for a job
    that completed and had children (the tree goes on through it); the root's may also be
    'dead', 'cancelled' or 'unknown', as :class:`JobResult` says them."""
    depends_on: tuple[int, ...]
    """Its parents (empty for a root pushed without any, or one no longer known)."""


@dataclasses.dataclass(frozen=True, eq=True)
class WorkflowStep(_RecordMapping):
    """One step a workflow run recorded (``QueueClient.workflow_steps``)."""

    position: int
    """0 for the run's first step, then 1, 2... in the order the run reached them."""
    name: str
    result: Any
    """What the step returned, as JSON gives it back (None: nothing)."""
    attempt: int
    """The run's attempt (its claim) that recorded it."""
    recorded_at: datetime
    result_error: str | None = None
    """None when ``result`` was decoded; else why Python could not decode it."""


@dataclasses.dataclass(frozen=True, eq=True)
class JobCursor(_RecordMapping):
    """Where a page of ``jobs`` ended: pass it as ``after`` for the next page, or carry its
    ``token`` (in a URL, on a command line) and read it back with ``JobCursor.parse(token)``.
    ``JobCursor.after(job, state)`` is the cursor after a job of a ``state`` listing (passing
    the job itself as ``after`` does the same).

    A listing orders by what its index is ordered by, so its cursor holds those columns of the
    last job: a pending or scheduled listing's its priority and run_at (pull order), a running
    listing's its visible_until (the claim's deadline), a dead listing's only its id. A cursor
    without those columns, or with columns its listing does not order by, raises
    InvalidStateError.
    """

    state: str
    """The listing it continues: a :class:`JobState` value."""
    id: int
    priority: int | None = None
    """The last job's priority (pending and scheduled listings)."""
    at: datetime | None = None
    """The last job's run_at (pending, scheduled) or visible_until (running)."""

    def __post_init__(self) -> None:
        parts = _TOKEN_PARTS.get(self.state)
        if parts is None:
            raise errors.InvalidStateError(
                f"state must be one of {', '.join(_TOKEN_PARTS)}, got {self.state!r}"
            )
        ordered_by_priority, ordered_by_time = parts == 4, parts > 2
        if not _is_int(self.id):
            raise errors.InvalidStateError(f"a cursor's id must be an int, got {self.id!r}")
        if ordered_by_priority != (self.priority is not None) or not (
            self.priority is None or _is_int(self.priority)
        ):
            raise errors.InvalidStateError(
                f"the cursor of a {self.state} listing "
                + ("needs the last job's priority" if ordered_by_priority else "has no priority")
            )
        if ordered_by_time != (self.at is not None) or not (
            self.at is None or (isinstance(self.at, datetime) and self.at.tzinfo is not None)
        ):
            raise errors.InvalidStateError(
                f"the cursor of a {self.state} listing "
                + ("needs a timezone-aware time" if ordered_by_time else "has no time")
            )

    @classmethod
    def after(cls, job: Job, state: str) -> JobCursor:
        """The cursor of the ``state`` listing that continues after ``job``.

        Raises:
            InvalidStateError: an unknown state, or a job that lacks what that listing orders
                by (a dead job for a pending listing, say).
        """
        if state in (JobState.PENDING.value, JobState.SCHEDULED.value):
            if job.run_at is None:
                raise errors.InvalidStateError(
                    f"job {job.id} has no run_at, so no place in a {state} listing"
                )
            return cls(state, job.id, job.priority, job.run_at)
        if state == JobState.RUNNING.value:
            if job.visible_until is None:
                raise errors.InvalidStateError(
                    f"job {job.id} has no claim deadline, so no place in a running listing"
                )
            return cls(state, job.id, None, job.visible_until)
        return cls(state, job.id)

    @property
    def token(self) -> str:
        """The cursor as text of digits, signs and colons, safe in a URL: the state, the id,
        and the priority and the time (whole microseconds since 1970 UTC) that it holds."""
        parts: list[object] = [self.state, self.id]
        if self.priority is not None:
            parts.append(self.priority)
        if self.at is not None:
            parts.append((self.at - _EPOCH) // timedelta(microseconds=1))
        return ":".join(str(part) for part in parts)

    @classmethod
    def parse(cls, token: str) -> JobCursor:
        """The cursor whose :attr:`token` is ``token``.

        Raises:
            InvalidStateError: ``token`` is not the token of a cursor.
        """
        parts = token.split(":") if isinstance(token, str) else []
        if not parts or _TOKEN_PARTS.get(parts[0]) != len(parts):
            raise errors.InvalidStateError(f"not the cursor of a jobs listing: {token!r}")
        try:
            numbers = [int(part) for part in parts[1:]]
            at = _EPOCH + timedelta(microseconds=numbers[-1]) if len(numbers) > 1 else None
        except (ValueError, OverflowError) as exc:
            raise errors.InvalidStateError(f"not the cursor of a jobs listing: {token!r}") from exc
        return cls(parts[0], numbers[0], numbers[1] if len(numbers) == 3 else None, at)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TOKEN_PARTS = {
    "pending": 4,
    "scheduled": 4,
    "running": 3,
    "dead": 2,
    "waiting": 2,
    "cancelled": 2,
}
"""How many parts the token of each listing's cursor has: the state, the id, the priority (pending,
scheduled), the time (all but dead)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


class NackOutcome(str, enum.Enum):
    """What a nack did: one of the :class:`Outcome` values a nack returns."""

    RETRIED = Outcome.RETRIED.value
    """The job is pending again and runs after its backoff."""
    DEAD_LETTERED = Outcome.DEAD_LETTERED.value
    """Its attempts were spent: the job moved to the dead-letter queue."""
    STALE = Outcome.STALE.value
    """The caller no longer held the claim; nothing changed."""
