"""The calls of schedules. The SQL module owns which runs are due and fires each exactly once;
cron expressions are parsed here (:mod:`postkit.queue.protocol.cron`), with croniter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from postkit import errors
from postkit.queue import limits
from postkit.queue.protocol import checks as check
from postkit.queue.protocol import readers as read
from postkit.queue.protocol.call import Call, Duration, Rows
from postkit.queue.protocol.cron import check_cron, next_run_after, zone
from postkit.queue.records import BrokenSchedule, Fired, Schedule, ScheduleRun


@dataclass(frozen=True)
class NewSchedule:
    """A schedule checked and ready to save, but for its first run time: that is computed
    from the database's clock (see :func:`save_schedule`)."""

    params: Mapping[str, Any]
    cron: str | None
    timezone: str
    every: timedelta | None


def new_schedule(
    namespace: str,
    name: str,
    queue: str,
    payload: object,
    *,
    cron: str | None,
    timezone: str,
    every: Duration | None,
    priority: int,
    max_attempts: int | None,
) -> NewSchedule:
    """Every check of a schedule that needs no database, so that a bad one raises before any
    SQL runs (even the read of the clock its first run is computed from)."""
    if (cron is None) == (every is None):
        raise errors.InvalidScheduleError("give exactly one of cron= and every=")
    seconds = check.seconds("every", every)
    # Compared as seconds: a number past timedelta's range (about 2.7 million years, either
    # way) must be refused, not overflow.
    if seconds is not None and seconds > limits.EVERY_MAX.total_seconds():
        shown = timedelta(seconds=seconds) if seconds < 8e13 else f"{seconds:g} seconds"
        raise errors.InvalidDurationError(
            f"every of {shown} is too long; the limit is {limits.EVERY_MAX}"
        )
    if seconds is not None and seconds < 1:
        raise errors.InvalidScheduleError("a schedule runs at most every second")
    interval = None if seconds is None else timedelta(seconds=seconds)
    zone(timezone)
    if cron is not None:
        check_cron(cron)
    params = check.base(
        namespace,
        name=check.name("schedule name", name, required=True),
        queue=check.name("queue", queue, required=True),
        payload=check.payload(payload),
        cron=cron,
        timezone=timezone,
        every=seconds,
        priority=check.required_integer(
            "priority", priority, errors.InvalidPriorityError, bounds=limits.PRIORITY
        ),
        max_attempts=check.integer(
            "max_attempts", max_attempts, errors.InvalidMaxAttemptsError, bounds=limits.MAX_ATTEMPTS
        ),
    )
    return NewSchedule(params, cron, timezone, interval)


def save_schedule(schedule: NewSchedule, *, now: datetime) -> Call[Schedule]:
    try:
        first = next_run_after(
            now, cron=schedule.cron, timezone=schedule.timezone, every=schedule.every
        )
    except Exception as exc:
        raise errors.InvalidScheduleError(
            f"cannot compute the schedule's first run: {exc}"
        ) from exc
    params = {**schedule.params, "next_run_at": first}
    return Call("save_schedule", params, lambda rows: read.schedule(rows[0]))


def _page(namespace: str, after: str | None, limit: int | None) -> dict[str, object]:
    return check.base(
        namespace,
        after=check.name("after", after, required=False),
        limit=None if limit is None else check.limit("schedules", limit),
    )


def schedules(
    namespace: str, *, after: str | None = None, limit: int | None = None
) -> Call[list[Schedule]]:
    return Call(
        "schedules",
        _page(namespace, after, limit),
        lambda rows: [read.schedule(row) for row in rows],
    )


def schedule_runs(
    namespace: str, *, after: str | None = None, limit: int | None = None
) -> Call[list[ScheduleRun]]:
    return Call(
        "schedule_runs",
        _page(namespace, after, limit),
        lambda rows: [ScheduleRun(**row) for row in rows],
    )


def set_schedule_paused(namespace: str, name: str, *, paused: bool) -> Call[bool]:
    params = check.base(
        namespace, name=check.name("schedule name", name, required=True), paused=paused
    )
    return Call("set_schedule_paused", params, read.scalar)


def delete_schedule(namespace: str, name: str) -> Call[bool]:
    params = check.base(namespace, name=check.name("schedule name", name, required=True))
    return Call("delete_schedule", params, read.scalar)


@dataclass(frozen=True)
class DueRun:
    """A due schedule, locked for this transaction, with the run to fire and the next one; or,
    when the next one cannot be computed, why (``next_run_at`` is then None)."""

    schedule: Schedule
    next_run_at: datetime | None
    problem: str | None = None


def _due_run(row: dict[str, Any]) -> DueRun:
    schedule = read.schedule(row)
    try:
        following = next_run_after(
            row["now"],
            cron=schedule.cron,
            timezone=schedule.timezone,
            every=schedule.every,
            due_at=schedule.next_run_at,
        )
    # Whatever croniter or zoneinfo raise over a stored expression or zone (a bad expression,
    # one that never fires, a zone this Python lacks, a date past year 9999): one schedule's
    # trouble, never the tick's.
    except Exception as exc:
        reason = (
            str(exc) if isinstance(exc, errors.PostkitError) else f"{type(exc).__name__}: {exc}"
        )
        return DueRun(schedule, None, f"cannot compute the next run: {reason}")
    return DueRun(schedule, following)


def due_schedules(namespace: str, *, limit: int) -> Call[list[DueRun]]:
    def parse(rows: Rows) -> list[DueRun]:
        return [_due_run(row) for row in rows]

    params = check.base(namespace, limit=check.limit("due_schedules", limit))
    return Call("due_schedules", params, parse)


def fire_schedule(namespace: str, run: DueRun) -> Call[Fired | BrokenSchedule | None]:
    if run.next_run_at is None:
        raise errors.InvalidScheduleError(f"schedule {run.schedule.name!r}: {run.problem}")
    next_run_at = run.next_run_at
    params = check.base(
        namespace,
        name=run.schedule.name,
        due_at=run.schedule.next_run_at,
        next_run_at=run.next_run_at,
    )

    def parse(rows: Rows) -> Fired | BrokenSchedule | None:
        if not rows:
            return None  # fenced out: fired or changed since it was read
        job_id, reason = rows[0]["job_id"], rows[0]["broken_reason"]
        if job_id is None:
            return BrokenSchedule(run.schedule.name, run.schedule.next_run_at, reason)
        return Fired(run.schedule.name, job_id, run.schedule.next_run_at, next_run_at)

    return Call("fire_schedule_run", params, parse)


def mark_schedule_broken(namespace: str, run: DueRun) -> Call[BrokenSchedule | None]:
    reason = check.error_text(run.problem or "cannot compute the next run")
    params = check.base(
        namespace, name=run.schedule.name, due_at=run.schedule.next_run_at, reason=reason
    )

    def parse(rows: Rows) -> BrokenSchedule | None:
        if not read.scalar(rows):
            return None
        return BrokenSchedule(run.schedule.name, run.schedule.next_run_at, reason or "")

    return Call("mark_schedule_broken", params, parse)
