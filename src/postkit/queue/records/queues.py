"""The queues' records: a queue's policy, its statistics, its outcomes, and what retention
pruned."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from postkit.queue.records.mapping import _RecordMapping


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
    fair: bool = False
    """The queue's claims are shared among its group keys by turns, each key given up to its
    weight (``set_group_weight``; 1 by default) per turn; False: claims follow pull order."""
    max_pending: int | None = None
    """A push that would make the queue hold more pending jobs than this is refused
    (``QueueFullError``); None: no limit."""

    @property
    def rate(self) -> tuple[int, float] | None:
        """The rate limit as ``configure_queue(rate=...)`` takes it: (claims, seconds), or
        None."""
        if self.rate_limit is None or self.rate_period is None:
            return None
        return (self.rate_limit, self.rate_period)


@dataclasses.dataclass(frozen=True, eq=True)
class GroupStats(_RecordMapping):
    """One group key of a queue at a glance (``group_stats``): its live jobs and its weight.
    Counts are exact up to the cap given to ``group_stats``; beyond it they read as the cap
    and ``counts_capped`` is true."""

    group_key: str
    pending: int
    """Ready to run now."""
    scheduled: int
    """Waiting for their run_at (delayed, or retrying after a backoff)."""
    running: int
    weight: int
    """The jobs each of its turns gives it in a fair queue (``set_group_weight``; 1 by
    default)."""
    counts_capped: bool


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
    """Completed in the last 60 seconds. The counters are kept per minute: this is the current
    minute's count plus the previous minute's, weighted by the part of it still within the
    last 60 seconds (exact when the outcomes of a minute are spread evenly), so it does not
    fall to 0 as a minute begins."""
    completed_last_hour: int
    dead_lettered_last_minute: int
    """Dead-lettered in the last 60 seconds, counted as ``completed_last_minute``."""
    dead_lettered_last_hour: int
    retried_last_hour: int
    rescued_last_hour: int
    """Expired claims returned to the queue by tick_timeouts."""
    mean_attempts: float | None
    """Mean attempts of the jobs completed in the last hour."""
    concurrency: int | None
    """The queue's concurrency limit, which ``running`` stands against; None: no limit."""
    rate_limited_until: datetime | None
    """While the queue's rate limit holds claims back, when the next claim may be made (by
    the queue's clock); None: it does not now (or the queue has none)."""
    waiting: int
    """Waiting for their parents to complete (``depends_on``)."""
    cancelled: int
    """Cancelled before they finished, kept for the queue's ``retain_dead``."""
    max_pending: int | None = None
    """The queue's backpressure limit (``configure_queue(max_pending=...)``), which
    ``pending`` and ``scheduled`` together stand against: a push past it is refused with
    ``QueueFullError``. None: no limit."""

    @property
    def full(self) -> bool:
        """Whether a push of one more job would be refused now (``max_pending`` reached)."""
        return self.max_pending is not None and self.pending + self.scheduled >= self.max_pending


@dataclasses.dataclass(frozen=True, eq=True)
class Outcomes(_RecordMapping):
    """A queue's outcomes from the start of a minute on (see ``QueueClient.outcomes_since``)."""

    queue: str
    completed: int
    """Acked."""
    dead_lettered: int
    """Moved to the dead-letter queue."""
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
    dead_lettered: int
    """Moved to the dead-letter queue."""
    retried: int
    """Nacked with attempts left."""
    rescued: int
    """Expired claims returned to the queue by tick_timeouts."""


@dataclasses.dataclass(frozen=True, eq=True)
class Pruned(_RecordMapping):
    """What one retention pass deleted."""

    completed_jobs: int
    dead_letters: int
    stats_rows: int
    results: int = 0
    """Job results whose retention (the queue's retain_results) ran out."""
    cancelled: int = 0
    """Cancelled jobs whose retention (the queue's retain_dead) ran out."""
    ancestry: int = 0
    """Links from completed jobs to their parents (``QueueClient.job_tree`` walks through them)
    whose retention (the queue's retain_dead) ran out."""

    steps: int = 0
    """Steps of finished workflow runs whose retention (the queue's retain_dead) ran out."""

    @property
    def batches(self) -> tuple[int, int, int, int, int, int]:
        """What each bounded batch deleted (every kind but the outcome counters): one at the
        call's limit means more may be due."""
        return (
            self.completed_jobs,
            self.dead_letters,
            self.results,
            self.cancelled,
            self.ancestry,
            self.steps,
        )
