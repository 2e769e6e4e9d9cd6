"""What the SDK returns (jobs and the cursors of their listings, what became of a job (its
result), dead letters and their searches, queue policies, statistics and outcomes per minute,
schedules, their last runs and what a tick fired, registered workers and the jobs they run),
each a read-only mapping with a typed attribute view (``job["payload"]`` and ``job.payload``
are the same value); and the two vocabularies they use, the job states and the outcomes, each
defined once here and kept in step with the SQL module's enum types
(``postkit_queue.job_state``, ``postkit_queue.outcome``) by a test."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Protocol

from postkit import errors


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


class Outcome(str, enum.Enum):
    """What settling or reclaiming a job did, as the SQL module names it
    (``postkit_queue.outcome``): the outcomes the statistics count, and what a nack or a
    reclaim returns."""

    COMPLETED = "completed"
    """Acknowledged: the job succeeded and left the queue."""
    RETRIED = "retried"
    """Pending again, to run after its backoff (a nack), or at once (a reclaim)."""
    RESCUED = "rescued"
    """An expired claim returned to the queue by tick_timeouts."""
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
    """A JobState value: 'pending', 'scheduled', 'running' or 'dead'. A pull returns
    'running' jobs; get_job and jobs return pending ones as 'pending' whatever their run_at."""
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


UNFINISHED_STATES = (JobState.PENDING.value, JobState.SCHEDULED.value, JobState.RUNNING.value)
"""The states of a :class:`JobResult` whose job has not finished."""


@dataclasses.dataclass(frozen=True, eq=True)
class JobResult(_RecordMapping):
    """What became of a job (``QueueClient.result``): its result once it completed, the dead
    letter's error once it was dead-lettered, or that it has not finished yet.

    ``state`` is one of:

    - 'pending', 'scheduled', 'running': not finished (``finished`` is False);
    - 'completed': ``value`` is what its handler returned (None when it returned None, or when
      its queue keeps completed jobs but no results, or the value could not be kept);
    - 'dead': dead-lettered, with the dead letter's ``error`` and ``reason``;
    - 'unknown': nothing is known: never pushed (or in another namespace), completed in a queue
      that keeps neither results nor completed jobs, cancelled, purged, or its record pruned.
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
    """Why it was dead-lettered: 'failed', 'attempts_exhausted' or 'timed_out'."""
    attempts: int | None = None
    """Claims so far (live), or the claims it took (completed, dead)."""
    finished_at: datetime | None = None
    """When it completed or was dead-lettered."""
    expires_at: datetime | None = None
    """When retention prunes the result, or the dead letter."""
    redriven_job_id: int | None = None
    """The job a dead letter was retried as: its result is that job's."""
    value_error: str | None = None
    """None when ``value`` was decoded; else why Python could not decode the stored result
    (``value`` is then None)."""

    @property
    def finished(self) -> bool:
        """The job completed or was dead-lettered: its result will not change (but for a
        redrive, whose new job has a result of its own)."""
        return self.state in ("completed", JobState.DEAD.value)


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


_TOKEN_PARTS = {"pending": 4, "scheduled": 4, "running": 3, "dead": 2}
"""How many parts the token of each listing's cursor has: the state, the id, the priority (pending,
scheduled), the time (all but dead)."""
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


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
class QueuePolicy(_RecordMapping):
    """The defaults a queue's jobs get when push and pull do not say otherwise."""

    max_attempts: int
    visibility_timeout: float
    """Seconds."""
    backoff_base: float
    """Seconds: the first retry comes after between one and two times this."""
    backoff_cap: float
    """Seconds: the longest a retry waits."""
    paused: bool
    """A paused queue hands out no jobs; pushes are still accepted."""
    retain_completed: float | None
    """Seconds completed jobs are kept in the archive; None: deleted at once."""
    retain_dead: float
    """Seconds dead letters are kept before pruning."""
    max_payload_bytes: int
    """The largest payload a push accepts (its stored size); larger ones raise
    InvalidPayloadError."""
    retain_results: float | None = None
    """Seconds the result of each completed job (what its handler returned) is kept for
    ``result`` and ``wait_for_result``; None: results are not kept."""
    concurrency: int | None = None
    """At most this many of the queue's jobs run at once, across every worker; None: no
    limit."""
    rate_limit: int | None = None
    """At most this many claims of the queue's jobs in any ``rate_period``; None: no limit."""
    rate_period: float | None = None
    """Seconds: the window ``rate_limit`` counts claims in."""
    group_concurrency: int | None = None
    """At most this many jobs of one group key (push's ``group_key``) run at once; None: no
    limit."""
    group_ordered: bool = False
    """The jobs of one group key run one at a time, in push order."""

    @property
    def rate(self) -> tuple[int, float] | None:
        """The rate limit as ``configure_queue(rate=...)`` takes it: (claims, seconds), or
        None."""
        if self.rate_limit is None or self.rate_period is None:
            return None
        return (self.rate_limit, self.rate_period)


class NackOutcome(str, enum.Enum):
    """What a nack did: one of the :class:`Outcome` values a nack returns."""

    RETRIED = Outcome.RETRIED.value
    """The job is pending again and runs after its backoff."""
    DEAD_LETTERED = Outcome.DEAD_LETTERED.value
    """Its attempts were spent: the job moved to the dead-letter queue."""
    STALE = Outcome.STALE.value
    """The caller no longer held the claim; nothing changed."""


@dataclasses.dataclass(frozen=True, eq=True)
class QueueStats(_RecordMapping):
    """One queue at a glance. Live counts are exact up to the cap given to ``stats``; beyond
    it they read as the cap and ``counts_capped`` is true."""

    queue: str
    paused: bool
    pending: int
    """Ready to run now."""
    scheduled: int
    """Waiting for their run_at (delayed, or retrying after a backoff)."""
    running: int
    dead: int
    """In the dead-letter queue, not yet redriven."""
    counts_capped: bool
    oldest_ready_age: timedelta | None
    """How long the oldest ready job has waited; None when none is ready."""
    completed_last_minute: int
    completed_last_hour: int
    failed_last_minute: int
    """Dead-lettered in the current minute."""
    failed_last_hour: int
    retried_last_hour: int
    rescued_last_hour: int
    """Expired claims returned to the queue by tick_timeouts."""
    mean_attempts: float | None
    """Mean attempts of the jobs completed in the last hour."""
    concurrency: int | None = None
    """The queue's concurrency limit, which ``running`` stands against; None: no limit."""
    rate_limited_until: datetime | None = None
    """While the queue's rate limit holds claims back, when the next claim may be made (by
    the queue's clock); None: it does not now (or the queue has none)."""


@dataclasses.dataclass(frozen=True, eq=True)
class Outcomes(_RecordMapping):
    """A queue's outcomes from the start of a minute on (see ``QueueClient.outcomes_since``)."""

    queue: str
    completed: int
    """Acked."""
    failed: int
    """Dead-lettered."""
    retried: int
    """Nacked with attempts left."""
    rescued: int
    """Expired claims returned to the queue by tick_timeouts."""


@dataclasses.dataclass(frozen=True, eq=True)
class OutcomeMinute(_RecordMapping):
    """A queue's outcomes in one minute (see ``QueueClient.outcome_series``)."""

    queue: str
    minute: datetime
    """The start of the minute, by the queue's clock."""
    completed: int
    """Acked."""
    failed: int
    """Dead-lettered."""
    retried: int
    """Nacked with attempts left."""
    rescued: int
    """Expired claims returned to the queue by tick_timeouts."""


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


@dataclasses.dataclass(frozen=True, eq=True)
class Pruned(_RecordMapping):
    """What one retention pass deleted."""

    completed_jobs: int
    dead_letters: int
    stats_rows: int
    results: int = 0
    """Job results whose retention (the queue's retain_results) ran out."""


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


_DECODED_FIELDS = ("payload", "value")
"""The fields of records that hold decoded JSON (a job's payload, a result's value)."""


def to_jsonable(value: Any) -> Any:
    """SDK records (dataclasses, mappings), times and durations as plain JSON values: times in
    ISO 8601, durations in seconds. A record's payload, and a result's value, is decoded JSON
    already and passes as it is: walking it would exhaust the recursion limit on a value nested
    a few hundred deep, which json.dumps still writes."""
    if isinstance(value, enum.Enum):
        return to_jsonable(value.value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: getattr(value, field.name)
            if field.name in _DECODED_FIELDS
            else to_jsonable(getattr(value, field.name))
            for field in dataclasses.fields(value)
        }
    if isinstance(value, Mapping):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(item) for item in value]
    return str(value)  # Decimal, UUID


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
