"""The dashboard's rows as JSON: a job in a list and on its page, a dead letter, a queue's stats,
and the payload previews and last errors they show."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from postkit.queue.records import DeadLetter, Job, QueueStats, to_jsonable

PREVIEW_CHARS = 160
"""How much of a payload a list shows."""


def stats_row(row: QueueStats) -> dict[str, Any]:
    """A queue's statistics, with whether a push would be refused now (``QueueStats.full``)."""
    return {**to_jsonable(row), "full": row.full}


def preview(record: Job | DeadLetter | Any) -> str:
    if getattr(record, "payload_error", None) is not None:
        return f"({record.payload_error})"
    try:
        text = json.dumps(record.payload, ensure_ascii=False, separators=(",", ":"))
    except (ValueError, RecursionError):
        return "(payload too deeply nested to show)"
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def job_row(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "run_at": None if job.run_at is None else job.run_at.isoformat(),
        "created_at": job.created_at.isoformat(),
        "age_seconds": None if job.age is None else job.age.total_seconds(),
        "worker_id": job.worker_id,
        "visible_until": None if job.visible_until is None else job.visible_until.isoformat(),
        "last_error": last_error(job.errors),
        "payload_preview": preview(job),
    }


def job_detail(job: Job) -> dict[str, Any]:
    detail = dict(to_jsonable(job))
    detail["claim_token"] = None  # the fence stays with the worker that holds the claim
    detail["payload_json"] = pretty(job)
    detail.pop("payload", None)
    return detail


def dead_letter_row(row: DeadLetter) -> dict[str, Any]:
    return {
        "job_id": row.job_id,
        "queue": row.queue,
        "reason": row.reason,
        "error": row.error,
        "attempts": row.attempts,
        "worker_id": row.worker_id,
        "failed_at": row.failed_at.isoformat(),
        "redriven_job_id": row.redriven_job_id,
        "payload_preview": preview(row),
    }


def pretty(job: Job) -> str | None:
    return None if job.payload_error is not None else pretty_value(job.payload)


def pretty_value(value: Any) -> str | None:
    """A decoded JSON value as indented text; None when it is too deep to write."""
    try:
        return json.dumps(value, ensure_ascii=False, indent=2)
    except (ValueError, RecursionError):
        return None


def last_error(errors: Sequence[Any]) -> str | None:
    """The first line of the last attempt's error. An entry that is not an object (written by
    hand) shows as its text."""
    if not errors:
        return None
    last = errors[-1]
    text = str((last.get("error") if isinstance(last, dict) else last) or "")
    return text.splitlines()[0][:300] if text else None
