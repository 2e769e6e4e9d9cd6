"""The operator's calls: dead letters, queue settings, listings and statistics, redrive, purge,
retention, and the vacuum service's statements."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

from postkit import errors
from postkit.queue import limits
from postkit.queue.protocol import checks as check
from postkit.queue.protocol import readers as read
from postkit.queue.protocol.call import Call, Duration, Rows
from postkit.queue.records import (
    DeadLetter,
    DeadLetterPosition,
    DeadLetterSearch,
    GroupStats,
    Job,
    JobCursor,
    JobState,
    LineageStep,
    OutcomeMinute,
    Outcomes,
    Pruned,
    QueuePolicy,
    QueueStats,
    Redriven,
)


def dead_letters(
    namespace: str,
    queue: str | None,
    *,
    limit: int,
    failed_after: datetime | None = None,
    failed_before: datetime | None = None,
    error_contains: str | None = None,
    include_redriven: bool = False,
    after: DeadLetterPosition | None = None,
) -> Call[list[DeadLetter]]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=False),
        limit=check.limit("dead_letters", limit),
        failed_after=check.time("failed_after", failed_after),
        failed_before=check.time("failed_before", failed_before),
        error_contains=check.text("error_contains", error_contains),
        include_redriven=bool(include_redriven),
        **check.dead_letter_position(after),
    )
    return Call("dead_letters", params, lambda rows: [read.dead_letter(row) for row in rows])


def count_dead_letters(
    namespace: str,
    queue: str | None,
    *,
    failed_after: datetime | None,
    failed_before: datetime | None,
    include_redriven: bool,
    cap: int,
) -> Call[int]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=False),
        failed_after=check.time("failed_after", failed_after),
        failed_before=check.time("failed_before", failed_before),
        include_redriven=bool(include_redriven),
        cap=check.limit("count_dead_letters", cap, "cap"),
    )
    return Call("count_dead_letters", params, lambda rows: int(read.scalar(rows)))


def search_dead_letters(
    namespace: str,
    error_contains: str,
    queue: str | None,
    *,
    limit: int,
    failed_after: datetime | None,
    failed_before: datetime | None,
    include_redriven: bool,
    after: DeadLetterPosition | None,
    scan_limit: int,
) -> Call[DeadLetterSearch]:
    needle = check.text("error_contains", error_contains)
    if not needle:
        raise errors.InvalidNameError("error_contains must be a non-empty str to search for")
    page = check.limit("search_dead_letters", limit)
    params = check.base(
        namespace,
        error_contains=needle,
        queue=check.name("queue", queue, required=False),
        limit=page,
        failed_after=check.time("failed_after", failed_after),
        failed_before=check.time("failed_before", failed_before),
        include_redriven=bool(include_redriven),
        **check.dead_letter_position(after),
        scan_limit=check.limit("search_scan", scan_limit, "scan_limit"),
    )

    def parse(rows: Rows) -> DeadLetterSearch:
        letters = [read.dead_letter(row) for row in rows if not row["searched_to"]]
        searched_to = [read.dead_letter(row) for row in rows if row["searched_to"]]
        if searched_to:
            return DeadLetterSearch(letters, searched_to[0], cut=True)
        return DeadLetterSearch(letters, letters[-1] if len(letters) == page else None, cut=False)

    return Call("search_dead_letters", params, parse)


T = TypeVar("T")


class Keep(enum.Enum):
    """The default of each setting in ``configure_queue``: the queue keeps the value it has."""

    KEEP = "keep"


KEEP = Keep.KEEP
"""A setting not given to ``configure_queue``: the queue keeps the one it has."""

Rate = tuple[int, Duration]
"""A rate limit: at most so many claims (int) in any window of so long (seconds or a
timedelta)."""

FLOW_LIMITS = ("concurrency", "rate", "group_concurrency", "group_ordered", "fair")
"""The flow limits of a queue, and whether it is fair, by the names configure_queue resets them
with."""

QUEUE_SETTINGS = (
    "max_attempts",
    "visibility_timeout",
    "backoff_base",
    "backoff_cap",
    "retain_completed",
    "retain_dead",
    "max_payload_bytes",
    "retain_results",
    "max_pending",
)
"""The job defaults and retentions of a queue that configure_queue writes; beside them, the
flow limits (FLOW_LIMITS)."""


def _flow_limits(
    *,
    concurrency: object,
    rate: object,
    group_concurrency: object,
    group_ordered: object,
    fair: object,
) -> dict[str, object]:
    """The flow limits as parameters (None: not given), checked as check_flow_limits checks
    them."""
    rate_limit = rate_period = None
    if rate is not None:
        if isinstance(rate, (str, bytes)) or not isinstance(rate, Sequence) or len(rate) != 2:
            raise errors.InvalidFlowControlError(
                "rate must be a pair (claims, period): at most so many claims in any period of "
                f"so many seconds, got {rate!r}"
            )
        rate_limit = check.required_integer(
            "a rate limit", rate[0], errors.InvalidFlowControlError, bounds=limits.RATE_LIMIT
        )
        rate_period = check.required_duration("rate_period", rate[1])
    for name, flag in (("group_ordered", group_ordered), ("fair", fair)):
        if flag is not None and not isinstance(flag, bool):
            raise errors.InvalidFlowControlError(
                f"{name} must be True or False, got {type(flag).__name__}"
            )
    checked_group = check.integer(
        "group_concurrency",
        group_concurrency,
        errors.InvalidFlowControlError,
        bounds=limits.GROUP_CONCURRENCY,
    )
    if group_ordered and checked_group is not None and checked_group > 1:
        raise errors.InvalidFlowControlError(
            "group_ordered runs one job of a key at a time, so group_concurrency must be 1 or "
            f"unset, got {checked_group}"
        )
    return {
        "concurrency": check.integer(
            "concurrency",
            concurrency,
            errors.InvalidFlowControlError,
            bounds=limits.QUEUE_CONCURRENCY,
        ),
        "rate_limit": rate_limit,
        "rate_period": rate_period,
        "group_concurrency": checked_group,
        "group_ordered": group_ordered,
        "fair": fair,
    }


def configure_queue(
    namespace: str,
    queue: str,
    *,
    max_attempts: int | Keep | None = KEEP,
    visibility_timeout: Duration | Keep | None = KEEP,
    backoff_base: Duration | Keep | None = KEEP,
    backoff_cap: Duration | Keep | None = KEEP,
    retain_completed: Duration | Keep | None = KEEP,
    retain_dead: Duration | Keep | None = KEEP,
    max_payload_bytes: int | Keep | None = KEEP,
    retain_results: Duration | Keep | None = KEEP,
    concurrency: int | Keep | None = KEEP,
    rate: Rate | Keep | None = KEEP,
    group_concurrency: int | Keep | None = KEEP,
    group_ordered: bool | Keep = KEEP,
    fair: bool | Keep = KEEP,
    max_pending: int | Keep | None = KEEP,
) -> Call[QueuePolicy]:
    """Set the settings of ``queue`` that are given, keeping the others; None puts a setting
    back to its built-in default (for a flow limit: none): the SQL function's p_reset names
    what is None."""
    settings = {
        "max_attempts": max_attempts,
        "visibility_timeout": visibility_timeout,
        "backoff_base": backoff_base,
        "backoff_cap": backoff_cap,
        "retain_completed": retain_completed,
        "retain_dead": retain_dead,
        "max_payload_bytes": max_payload_bytes,
        "retain_results": retain_results,
        "concurrency": concurrency,
        "rate": rate,
        "group_concurrency": group_concurrency,
        "group_ordered": group_ordered,
        "fair": fair,
        "max_pending": max_pending,
    }
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        max_attempts=check.integer(
            "max_attempts",
            _given(max_attempts),
            errors.InvalidMaxAttemptsError,
            bounds=limits.MAX_ATTEMPTS,
        ),
        visibility_timeout=check.duration("visibility_timeout", _given(visibility_timeout)),
        backoff_base=check.duration("backoff_base", _given(backoff_base)),
        backoff_cap=check.duration("backoff_cap", _given(backoff_cap)),
        retain_completed=check.duration("retain_completed", _given(retain_completed)),
        retain_dead=check.duration("retain_dead", _given(retain_dead)),
        max_payload_bytes=check.integer(
            "max_payload_bytes",
            _given(max_payload_bytes),
            errors.InvalidPayloadError,
            bounds=limits.MAX_PAYLOAD_BYTES,
        ),
        retain_results=check.duration("retain_results", _given(retain_results)),
        max_pending=check.integer(
            "max_pending",
            _given(max_pending),
            errors.InvalidFlowControlError,
            bounds=limits.MAX_PENDING,
        ),
        **_flow_limits(
            concurrency=_given(concurrency),
            rate=_given(rate),
            group_concurrency=_given(group_concurrency),
            group_ordered=_given(group_ordered),
            fair=_given(fair),
        ),
    )
    # The names are the settings' own, so the array literal needs no quoting.
    reset = [name for name, value in settings.items() if value is None]
    params["reset"] = "{" + ",".join(reset) + "}"
    return Call("configure_queue", params, lambda rows: QueuePolicy(**rows[0]))


def _given(value: T | Keep) -> T | None:
    """A setting as the SQL function takes it: None when it is to be kept."""
    return None if isinstance(value, Keep) else value


def outcomes_since(namespace: str, since: datetime) -> Call[list[Outcomes]]:
    moment = check.time("since", since)
    if moment is None:
        raise errors.InvalidDurationError("since is required")
    params = check.base(namespace, since=moment)
    return Call("outcomes_since", params, lambda rows: [Outcomes(**row) for row in rows])


def outcome_series(namespace: str, since: datetime, queue: str | None) -> Call[list[OutcomeMinute]]:
    moment = check.time("since", since)
    if moment is None:
        raise errors.InvalidDurationError("since is required")
    params = check.base(namespace, since=moment, queue=check.name("queue", queue, required=False))
    return Call("outcome_series", params, lambda rows: [OutcomeMinute(**row) for row in rows])


def namespaces() -> Call[list[str]]:
    return Call("namespaces", {}, lambda rows: [str(row["namespace"]) for row in rows])


def queues(namespace: str) -> Call[list[str]]:
    return Call("queues", check.base(namespace), lambda rows: [str(row["queue"]) for row in rows])


def known_queues(namespace: str) -> Call[list[str]]:
    return Call(
        "known_queues", check.base(namespace), lambda rows: [str(row["queue"]) for row in rows]
    )


def register_queues(namespace: str, queues: Sequence[str]) -> Call[int]:
    params = check.base(namespace, queues=check.queue_list(queues))
    return Call("register_queues", params, lambda rows: int(read.scalar(rows)))


def stats(
    namespace: str,
    queue: str | None,
    *,
    cap: int,
    after: str | None = None,
    limit: int | None = None,
) -> Call[list[QueueStats]]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=False),
        cap=check.limit("stats", cap, "cap"),
        after=check.name("after", after, required=False),
        limit=None if limit is None else check.limit("stats_page", limit),
    )
    return Call("stats", params, lambda rows: [QueueStats(**row) for row in rows])


JOB_STATES = tuple(state.value for state in JobState)
"""The states a listing of jobs takes."""


def jobs(
    namespace: str, queue: str, state: str, *, limit: int, after: Job | JobCursor | None
) -> Call[list[Job]]:
    if state not in JOB_STATES:
        raise errors.InvalidStateError(f"state must be one of {', '.join(JOB_STATES)}")
    if after is None or isinstance(after, JobCursor):
        cursor = after
    elif isinstance(after, Job):
        cursor = JobCursor.after(after, state)
    else:
        raise errors.InvalidStateError(
            f"after must be a Job or a JobCursor, got {type(after).__name__}"
        )
    if cursor is not None and cursor.state != state:
        raise errors.InvalidStateError(
            f"the cursor continues a {cursor.state} listing, not a {state} one"
        )
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        state=state,
        limit=check.limit("jobs", limit),
        after_id=None if cursor is None else check.job_id(cursor.id),
        after_priority=None
        if cursor is None
        else check.integer(
            "the cursor's priority",
            cursor.priority,
            errors.InvalidStateError,
            bounds=limits.PRIORITY,
        ),
        after_at=None if cursor is None else cursor.at,
    )
    return Call("jobs", params, lambda rows: [read.job(row) for row in rows])


def redrive(
    namespace: str,
    *,
    job_ids: Sequence[int] | None,
    queue: str | None,
    failed_after: datetime | None,
    failed_before: datetime | None,
    error_contains: str | None,
    to_queue: str | None,
    limit: int,
    dry_run: bool,
) -> Call[list[Redriven]]:
    params = check.base(
        namespace,
        job_ids=check.job_ids(job_ids),
        queue=check.name("queue", queue, required=False),
        failed_after=check.time("failed_after", failed_after),
        failed_before=check.time("failed_before", failed_before),
        error_contains=check.text("error_contains", error_contains),
        to_queue=check.name("to_queue", to_queue, required=False),
        limit=check.limit("redrive", limit),
        dry_run=bool(dry_run),
    )
    return Call("redrive", params, lambda rows: [Redriven(**row) for row in rows])


def job_lineage(namespace: str, job_id: int, *, limit: int) -> Call[list[LineageStep]]:
    params = check.base(
        namespace, job_id=check.job_id(job_id), limit=check.limit("job_lineage", limit)
    )
    return Call("job_lineage", params, lambda rows: [LineageStep(**row) for row in rows])


def purge_dead_letters(
    namespace: str,
    *,
    older_than: Duration | None,
    failed_before: datetime | None = None,
    queue: str | None,
    job_ids: Sequence[int] | None = None,
    failed_after: datetime | None = None,
) -> Call[int]:
    if (older_than is None) == (failed_before is None):
        raise errors.InvalidDurationError("give exactly one of older_than and failed_before")
    queue_name = check.name("queue", queue, required=False)
    if failed_before is not None:
        params = check.base(
            namespace,
            failed_before=check.time("failed_before", failed_before),
            queue=queue_name,
            job_ids=check.job_ids(job_ids),
            failed_after=check.time("failed_after", failed_after),
        )
        return Call("purge_dead_letters_before", params, lambda rows: int(read.scalar(rows)))
    if job_ids is not None or failed_after is not None:
        raise errors.InvalidDurationError(
            "job_ids and failed_after need failed_before: read the cutoff once and pass it, so "
            "that the count shown and the purge agree"
        )
    params = check.base(
        namespace, older_than=check.required_duration("older_than", older_than), queue=queue_name
    )
    return Call("purge_dead_letters", params, lambda rows: int(read.scalar(rows)))


def get_queue_policy(namespace: str, queue: str) -> Call[QueuePolicy]:
    params = check.base(namespace, queue=check.name("queue", queue, required=True))
    return Call("get_queue_policy", params, lambda rows: QueuePolicy(**rows[0]))


def set_group_weight(namespace: str, queue: str, group_key: str, weight: int | None) -> Call[int]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        group_key=check.name("group_key", group_key, required=True),
        weight=check.integer(
            "weight", weight, errors.InvalidFlowControlError, bounds=limits.GROUP_WEIGHT
        ),
    )
    return Call("set_group_weight", params, lambda rows: int(read.scalar(rows)))


def group_weights(
    namespace: str, queue: str, *, after: str | None, limit: int
) -> Call[dict[str, int]]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        after=check.name("after", after, required=False),
        limit=check.limit("group_weights", limit),
    )
    return Call(
        "group_weights",
        params,
        lambda rows: {str(row["group_key"]): int(row["weight"]) for row in rows},
    )


def group_stats(
    namespace: str, queue: str, *, after: str | None, limit: int, cap: int
) -> Call[list[GroupStats]]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        after=check.name("after", after, required=False),
        limit=check.limit("group_stats", limit),
        cap=check.limit("stats", cap, "cap"),
    )
    return Call("group_stats", params, lambda rows: [GroupStats(**row) for row in rows])


def cancel(namespace: str, job_id: int) -> Call[bool]:
    return Call("cancel", check.base(namespace, job_id=check.job_id(job_id)), read.scalar)


def cancel_tree(namespace: str, job_id: int, *, limit: int) -> Call[int]:
    params = check.base(
        namespace, job_id=check.job_id(job_id), limit=check.limit("cancel_tree", limit)
    )
    return Call("cancel_tree", params, lambda rows: int(read.scalar(rows)))


def cancel_run(namespace: str, run_id: int, *, limit: int) -> Call[int]:
    params = check.base(
        namespace, job_id=check.job_id(run_id), limit=check.limit("cancel_run", limit)
    )
    return Call("cancel_run", params, lambda rows: int(read.scalar(rows)))


def cancel_queue(
    namespace: str, queue: str, *, created_before: datetime | None, limit: int
) -> Call[int]:
    params = check.base(
        namespace,
        queue=check.name("queue", queue, required=True),
        created_before=None
        if created_before is None
        else check.time("created_before", created_before),
        limit=check.limit("cancel_queue", limit),
    )
    return Call("cancel_queue", params, lambda rows: int(read.scalar(rows)))


def set_queue_paused(namespace: str, queue: str, *, paused: bool) -> Call[bool]:
    params = check.base(namespace, queue=check.name("queue", queue, required=True))
    return Call("pause_queue" if paused else "resume_queue", params, read.scalar)


def purge_queue(
    namespace: str, queue: str, *, created_before: datetime | None = None, dry_run: bool = False
) -> Call[int]:
    if not isinstance(dry_run, bool):
        raise errors.InvalidStateError(f"dry_run must be a bool, got {type(dry_run).__name__}")
    queue_name = check.name("queue", queue, required=True)
    if created_before is None:
        if dry_run:
            raise errors.InvalidDurationError("a dry run needs created_before")
        return Call(
            "purge_queue",
            check.base(namespace, queue=queue_name),
            lambda rows: int(read.scalar(rows)),
        )
    params = check.base(
        namespace,
        queue=queue_name,
        created_before=check.time("created_before", created_before),
        dry_run=dry_run,
    )
    return Call("purge_queue_before", params, lambda rows: int(read.scalar(rows)))


def prune(namespace: str, *, limit: int) -> Call[Pruned]:
    params = check.base(namespace, limit=check.limit("prune", limit))
    return Call("prune", params, lambda rows: Pruned(**rows[0]))


@dataclass(frozen=True)
class VacuumState:
    """Whether the session's role may vacuum ``postkit_queue.jobs``, and its dead rows now."""

    may_vacuum: bool
    dead_rows: int


def vacuum_state() -> Call[VacuumState]:
    return Call(
        "vacuum_state",
        {},
        lambda rows: VacuumState(bool(rows[0]["may_vacuum"]), int(rows[0]["dead_rows"])),
    )


def vacuum_lock() -> Call[bool]:
    """Try to become the one session vacuuming the jobs table; False when another is."""
    return Call("vacuum_lock", {}, read.scalar)


def vacuum_jobs() -> Call[None]:
    """VACUUM the jobs table (a utility statement: autocommit only, no rows)."""
    return Call("vacuum_jobs", {}, lambda rows: None)


def vacuum_unlock() -> Call[bool]:
    return Call("vacuum_unlock", {}, read.scalar)
