"""Cancelling a running job races its worker's settle and the rescue of its expired claim. The
job's row lock orders them: cancel locks the row before it deletes it, a settle and a rescue
lock it too, and whichever commits first decides. A cancel that comes first makes every later
call of the claim stale and leaves nothing to retry; a settle that comes first is kept, and
the cancel then cancels only what is left to run."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from postkit.queue import QueueClient
from postkit.queue.records import Job
from tests.queue.conftest import WaitUntilBlocked, commit

Q = "exports"

Shift = Callable[[QueueClient, float], None]

SETTLES: dict[str, Callable[[QueueClient, Job], bool]] = {
    "ack": lambda client, job: client.ack(job),
    "nack": lambda client, job: client.nack(job, error="boom", backoff=0),
    "fail": lambda client, job: client.fail(job, error="boom"),
    "extend": lambda client, job: client.extend_visibility(job, extension=60),
    "release": lambda client, job: client.release(job),
}

AFTER_THE_SETTLE = {
    # What cancel returns once the settle committed, and what the job is then.
    "ack": (False, "completed"),
    "nack": (True, "cancelled"),
    "fail": (False, "dead"),
    "extend": (True, "cancelled"),
    "release": (True, "cancelled"),
}


@pytest.fixture
def clients(make_client: Callable[..., QueueClient]) -> tuple[QueueClient, QueueClient]:
    """An operator and a worker, each on a connection of its own; the queue keeps results, so
    that a completed job says so."""
    operator, worker = make_client(), make_client()
    operator.configure_queue(Q, retain_results=3600)
    commit(operator)
    return operator, worker


def running(operator: QueueClient, worker: QueueClient, **pull: Any) -> Job:
    job_id = operator.push(Q, {})
    commit(operator)
    job = worker.pull(Q, worker_id="w1", **pull)
    assert job is not None and job.id == job_id
    commit(worker)
    return job


@pytest.mark.parametrize("settle", sorted(SETTLES))
def test_a_settle_that_waits_for_a_cancel_finds_its_claim_stale(
    settle: str,
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    operator, worker = clients
    job = running(operator, worker)

    assert operator.cancel(job.id)  # holds the job's row until it commits
    outcome = executor.submit(SETTLES[settle], worker, job)
    wait_until_blocked(worker, operator, outcome)
    commit(operator)

    assert outcome.result(timeout=10) is False
    commit(worker)
    assert operator.result(job.id).state == "cancelled"
    assert operator.pull(Q, worker_id="w2") is None  # nothing left to retry


@pytest.mark.parametrize("settle", sorted(SETTLES))
def test_a_cancel_that_waits_for_a_settle_cancels_only_what_is_left_to_run(
    settle: str,
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    operator, worker = clients
    job = running(operator, worker)

    assert SETTLES[settle](worker, job)  # holds the job's row until it commits
    cancel = executor.submit(operator.cancel, job.id)
    wait_until_blocked(operator, worker, cancel)
    commit(worker)

    cancelled, state = AFTER_THE_SETTLE[settle]
    assert cancel.result(timeout=10) is cancelled
    commit(operator)
    assert operator.result(job.id).state == state
    assert operator.pull(Q, worker_id="w2") is None


def test_a_rescue_that_comes_first_leaves_a_pending_job_for_the_cancel(
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
    shift_clock: Shift,
) -> None:
    operator, worker = clients
    job = running(operator, worker, visibility_timeout=1)
    shift_clock(worker, 5)  # the claim expired

    assert worker.tick_timeouts() == 1  # holds the job's row until it commits
    cancel = executor.submit(operator.cancel, job.id)
    wait_until_blocked(operator, worker, cancel)
    commit(worker)

    assert cancel.result(timeout=10) is True
    commit(operator)
    assert operator.result(job.id).state == "cancelled"
    assert operator.pull(Q, worker_id="w2") is None


def test_a_rescue_skips_a_job_whose_cancel_is_in_progress(
    clients: tuple[QueueClient, QueueClient], executor: ThreadPoolExecutor, shift_clock: Shift
) -> None:
    """tick_timeouts skips a locked row instead of waiting (many processes run it at once):
    the cancel in progress commits, and there is nothing left to rescue."""
    operator, worker = clients
    job = running(operator, worker, visibility_timeout=1)
    shift_clock(worker, 5)

    assert operator.cancel(job.id)
    assert executor.submit(worker.tick_timeouts).result(timeout=10) == 0
    commit(operator)

    assert worker.tick_timeouts() == 0
    assert worker.ack(job) is False
    assert operator.result(job.id).state == "cancelled"


def test_a_job_whose_claim_expired_unrescued_is_cancelled_as_a_running_one(
    clients: tuple[QueueClient, QueueClient], shift_clock: Shift
) -> None:
    operator, worker = clients
    job = running(operator, worker, visibility_timeout=1)
    shift_clock(operator, 5)

    assert operator.cancel(job.id)
    commit(operator)

    shift_clock(worker, 5)
    assert worker.tick_timeouts() == 0
    assert worker.ack(job) is False
    assert operator.result(job.id).state == "cancelled"
