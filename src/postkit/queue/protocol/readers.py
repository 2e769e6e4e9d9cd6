"""Row readers: each turns the rows of one statement into what the SDK returns."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from postkit.queue.protocol.call import Rows
from postkit.queue.records import DeadLetter, Job, JobResult, Schedule, TreeJob, WorkflowStep

# A run of digits long enough to hold a fraction past the largest float (about 1.8e308).
_LONG_DIGITS = re.compile(r"[0-9]{309}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"a number of {len(text)} characters does not fit a float")
    return value


def decode(text: str, what: str) -> tuple[Any, str | None]:
    """A stored JSON value as Python, and None; or None and why Python cannot decode it.

    PostgreSQL accepts JSON that Python's json module refuses: arrays and objects nested
    deeper than the interpreter's recursion limit (RecursionError), and integers of more
    digits than ``sys.get_int_max_str_digits()`` (ValueError). Such a value is valid to the SQL
    API, so reading it must never raise: the reader gets the reason instead, and the record
    stays readable. A fraction past the largest float, which json.loads would turn into
    infinity (no JSON value, so never written back), is refused the same way; only a text
    with 309 digits in a row can hold one, so only such a text pays for the check. The message
    never quotes the value, which may be megabytes long."""
    try:
        if len(text) >= 309 and _LONG_DIGITS.search(text):
            return json.loads(text, parse_float=_finite_float), None
        return json.loads(text), None
    except (RecursionError, ValueError) as exc:
        return None, f"{what} could not be decoded: {type(exc).__name__}: {exc}"


def _errors(text: str) -> tuple[dict[str, Any], ...]:
    # Most claimed jobs have no history yet: no JSON to parse.
    if text == "[]":
        return ()
    history, problem = decode(text, "error history")
    if problem is not None:
        return ({"error": problem},)
    return tuple(history)


def _trace_context(text: str | None) -> dict[str, str] | None:
    # The SQL API stores only objects of strings; anything else (written past it) reads as none.
    if text is None:
        return None
    carrier, problem = decode(text, "trace context")
    if (
        problem is not None
        or not isinstance(carrier, dict)
        or not all(isinstance(value, str) for value in carrier.values())
    ):
        return None
    return carrier


def job(row: dict[str, Any]) -> Job:
    payload, payload_error = decode(row["payload"], "payload")
    return Job.from_fields(
        dict(
            id=row["id"],
            queue=row["queue"],
            payload=payload,
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            worker_id=row["worker_id"],
            claim_token=row["claim_token"],
            visible_until=row["visible_until"],
            state=row["state"],
            priority=row["priority"],
            run_at=row["run_at"],
            namespace=row["namespace"],
            unique_key=row["unique_key"],
            claimed_at=row["claimed_at"],
            errors=_errors(row["errors"]),
            created_at=row["created_at"],
            failed_at=row.get("failed_at"),
            payload_error=payload_error,
            trace_context=_trace_context(row["trace_context"]),
            age=row.get("age"),
            group_key=row.get("group_key"),
            claim_expired=bool(row.get("claim_expired")),
            depends_on=tuple(row.get("depends_on") or ()),
            waiting_on=row.get("waiting_on"),
            progress=row.get("progress"),
            progress_note=row.get("progress_note"),
            progress_at=row.get("progress_at"),
        )
    )


def dead_letter(row: dict[str, Any]) -> DeadLetter:
    payload, payload_error = decode(row["payload"], "payload")
    return DeadLetter(
        job_id=row["job_id"],
        queue=row["queue"],
        payload=payload,
        error=row["error"],
        errors=_errors(row["errors"]),
        reason=row["reason"],
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        worker_id=row["worker_id"],
        priority=row["priority"],
        unique_key=row["unique_key"],
        namespace=row["namespace"],
        created_at=row["created_at"],
        failed_at=row["failed_at"],
        expires_at=row["expires_at"],
        redriven_job_id=row["redriven_job_id"],
        redriven_at=row["redriven_at"],
        payload_error=payload_error,
        trace_context=_trace_context(row["trace_context"]),
    )


def job_result(rows: Rows) -> JobResult:
    row = rows[0]
    value, value_error = (None, None) if row["result"] is None else decode(row["result"], "result")
    return JobResult(
        job_id=row["job_id"],
        state=row["state"],
        queue=row["queue"],
        value=value,
        error=row["error"],
        reason=row["reason"],
        attempts=row["attempts"],
        finished_at=row["finished_at"],
        expires_at=row["expires_at"],
        redriven_job_id=row["redriven_job_id"],
        value_error=value_error,
    )


def event(rows: Rows) -> tuple[str, Any]:
    """wait_event's row: its status, and the event's payload when one was received."""
    row = rows[0]
    payload = None if row["payload"] is None else decode(row["payload"], "payload")[0]
    return str(row["status"]), payload


def workflow_steps(rows: Rows) -> list[WorkflowStep]:
    steps = []
    for row in rows:
        result, result_error = (
            (None, None) if row["result"] is None else decode(row["result"], "result")
        )
        steps.append(
            WorkflowStep(
                position=row["position"],
                name=row["name"],
                result=result,
                attempt=row["attempt"],
                recorded_at=row["recorded_at"],
                result_error=result_error,
            )
        )
    return steps


def tree_jobs(rows: Rows) -> list[TreeJob]:
    return [
        TreeJob(
            job_id=row["job_id"],
            depth=row["depth"],
            queue=row["queue"],
            state=row["state"],
            depends_on=tuple(row["depends_on"] or ()),
        )
        for row in rows
    ]


def parent_results(rows: Rows) -> dict[int, Any]:
    """Each parent's result by id: None where none was kept, or it cannot be decoded."""
    return {
        row["parent_id"]: None if row["result"] is None else decode(row["result"], "result")[0]
        for row in rows
    }


def scalar(rows: Rows) -> Any:
    return next(iter(rows[0].values()))


def optional_job(rows: Rows) -> Job | None:
    return job(rows[0]) if rows else None


def schedule(row: dict[str, Any]) -> Schedule:
    fields = {key: value for key, value in row.items() if key != "now"}
    fields["payload"], fields["payload_error"] = decode(row["payload"], "payload")
    return Schedule(**fields)


@dataclass(frozen=True)
class NextDue:
    """When the earliest pending job falls due, read with the database's clock."""

    seconds: float | None
    """Seconds until it is due (0 or less: due now); None when nothing is pending."""


def next_due(rows: Rows) -> NextDue:
    due, now = rows[0]["next_run_at"], rows[0]["now"]
    return NextDue(None if due is None else (due - now).total_seconds())
