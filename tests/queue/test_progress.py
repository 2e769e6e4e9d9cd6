"""Progress: a running job's handler reports how far it got, fenced by its claim; get_job reads
it back, and a retry, a release or a rescue clears it."""

from __future__ import annotations

import math
from typing import Any

import psycopg
import pytest

from postkit import errors
from postkit.queue import QueueClient
from postkit.queue.records import Job

Q = "reports"


def running(queue: QueueClient) -> Job:
    queue.push(Q, {})
    job = queue.pull(Q, worker_id="w")
    assert job is not None
    return job


def test_a_report_is_read_back_with_when_it_was_made(queue: QueueClient) -> None:
    job = running(queue)

    assert queue.report_progress(job, 0.25, note="part 1 of 4")

    found = queue.get_job(job.id)
    assert found is not None
    assert (found.progress, found.progress_note) == (0.25, "part 1 of 4")
    assert found.progress_at is not None and job.claimed_at is not None
    assert job.claimed_at <= found.progress_at <= queue.clock()


def test_a_stale_claim_reports_nothing(queue: QueueClient) -> None:
    job = running(queue)
    assert queue.release(job)
    again = queue.pull(Q, worker_id="w2")
    assert again is not None and again.id == job.id

    assert queue.report_progress(job.id, 0.5, claim_token=job.claim_token) is False

    found = queue.get_job(job.id)
    assert found is not None and found.progress is None


def test_a_retry_clears_the_last_attempts_progress(queue: QueueClient) -> None:
    job = running(queue)
    assert queue.report_progress(job, 0.9)

    assert queue.nack(job, error="boom")

    found = queue.get_job(job.id)
    assert found is not None and (found.progress, found.progress_at) == (None, None)


@pytest.mark.parametrize("fraction", [-0.01, 1.01, math.nan, math.inf, True, "0.5", None])
def test_a_fraction_outside_0_to_1_is_refused_before_anything_is_sent(
    queue: QueueClient, fraction: Any
) -> None:
    job = running(queue)

    with pytest.raises(errors.InvalidProgressError):
        queue.report_progress(job, fraction)

    assert queue.report_progress(job, 1)  # the transaction goes on


@pytest.mark.parametrize("note", ["x" * 201, "a\x00b", 5, "\ud800"])
def test_a_note_past_200_characters_or_not_text_is_refused(queue: QueueClient, note: Any) -> None:
    job = running(queue)

    with pytest.raises(errors.InvalidProgressError):
        queue.report_progress(job, 0.5, note=note)


@pytest.mark.parametrize(
    ("fraction", "note"), [(1.5, None), (-1, None), (float("nan"), None), (0.5, "x" * 201)]
)
def test_the_sql_function_refuses_what_the_sdk_would_have(
    queue: QueueClient, fraction: float, note: str | None
) -> None:
    job = running(queue)

    with pytest.raises(psycopg.Error) as raised:
        queue.cursor.execute(
            "SELECT postkit_queue.report_progress(%s, %s, %s, %s, NULL, %s)",
            (queue.namespace, job.id, fraction, note, job.claim_token),
        )
    assert raised.value.sqlstate == "PKQ20"


def test_progress_needs_the_worker_access_kind(queue: QueueClient) -> None:
    """report_progress is a worker's call (its access line in the schema)."""
    queue.cursor.execute("SELECT access FROM postkit_queue.api WHERE name = 'report_progress'")
    assert queue.cursor.fetchone() == ("worker",)
