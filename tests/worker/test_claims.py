"""The worker's claimed jobs as state machines (postkit.worker.claims): each move is one method,
and what the heartbeat, the fetcher and the shutdown see follows from the state alone. No
database here: these are the rules the worker tests exercise end to end."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from datetime import datetime, timedelta, timezone

from postkit.queue import Job
from postkit.worker.claims import Claims, ClaimState

CLAIM = timedelta(seconds=30)
LATER = 1e12
"""A moment past every heartbeat (monotonic seconds)."""


def claimed(job_id: int, queue: str = "q") -> Job:
    now = datetime.now(timezone.utc)
    return Job(
        id=job_id,
        queue=queue,
        payload={},
        attempts=1,
        max_attempts=20,
        worker_id="w",
        claim_token="t",
        visible_until=now + CLAIM,
        state="running",
        priority=0,
        run_at=now,
        namespace="ns",
        unique_key=None,
        claimed_at=now,
        errors=(),
        created_at=now,
    )


def book() -> tuple[Claims, list[tuple[str, float]]]:
    ended: list[tuple[str, float]] = []
    return Claims(lambda queue, started: ended.append((queue, started))), ended


def test_a_claimed_job_holds_a_slot_and_its_heartbeats_until_it_is_settled() -> None:
    claims, _ = book()
    job = claimed(1)
    claims.add(job)
    assert claims.held() == (1, 0)
    due, _ = claims.due_beats(math.inf, 5.0)
    assert due == [job]

    assert claims.start(job, timeout=None) is not None
    assert claims.claim_outcome(job)
    assert claims.due_beats(math.inf, 5.0)[0] == [], "a settling job's claim is not extended"
    claims.finish(job)
    assert claims.held() == (0, 1)


def test_a_job_that_succeeded_leaves_its_slot_and_waits_for_the_batched_ack() -> None:
    claims, ended = book()
    job = claimed(1, "emails")
    claims.add(job)
    started = claims.start(job, timeout=60)
    assert started is not None and claims.claim_outcome(job)
    claims.complete(job, started)

    assert claims.held() == (0, 1)
    assert claims.take_finished() == [(job, started)]
    assert ended == [("emails", started)]


def test_a_handler_past_its_timeout_is_nacked_and_its_late_outcome_dropped() -> None:
    claims, ended = book()
    job = claimed(1)
    claims.add(job)
    started = claims.start(job, timeout=0)
    assert started is not None

    assert claims.expire_overdue(math.inf) == [(job, started)]
    assert claims.ran_late(job)
    assert claims.due_beats(math.inf, 5.0)[0] == [], "no heartbeat for a timed-out claim"
    assert claims.held()[0] == 1, "the slot is held until the nack is done"
    claims.finish(job)  # the heartbeat's nack went through
    assert claims.held() == (0, 1)

    assert not claims.claim_outcome(job), "the handler's own outcome comes too late"
    claims.drop_late_outcome(job)
    assert not claims.ran_late(job), "forgotten once its handler ended"
    assert ended == []


def test_a_late_handler_that_ends_before_its_nack_is_forgotten_with_the_nack() -> None:
    claims, _ = book()
    job = claimed(1)
    claims.add(job)
    claims.start(job, timeout=0)
    claims.expire_overdue(math.inf)
    assert not claims.claim_outcome(job)
    claims.drop_late_outcome(job)

    claims.finish(job)
    assert not claims.ran_late(job) and claims.held() == (0, 1)


def test_the_shutdown_releases_the_jobs_never_started_and_keeps_the_running_ones() -> None:
    claims, _ = book()
    waiting, running, settling = claimed(1), claimed(2), claimed(3)
    for job in (waiting, running, settling):
        claims.add(job)
    claims.start(running, timeout=None)
    claims.start(settling, timeout=None)
    claims.claim_outcome(settling)

    released, kept = claims.release_waiting()

    assert released == [waiting]
    assert kept == [running, settling]
    assert claims.start(waiting, timeout=None) is None, "a handler thread skips it"


def test_a_lost_claim_is_reported_once_and_no_longer_extended() -> None:
    claims, _ = book()
    kept, lost = claimed(1), claimed(2)
    claims.add(kept)
    claims.add(lost)

    assert claims.extended([kept, lost], {lost.id}, at=0.0) == [lost]

    due, _ = claims.due_beats(LATER, 5.0)
    assert due == [kept]


def test_the_counts_per_queue_tell_running_from_held() -> None:
    claims, _ = book()
    for job_id in (1, 2, 3):
        claims.add(claimed(job_id, "a"))
    claims.start(claimed(1, "a"), timeout=None)

    running, held = claims.counts_by_queue()

    assert (running["a"], held["a"]) == (1, 3)
    assert {state.value for state in ClaimState} == {
        "waiting",
        "running",
        "settling",
        "timed_out",
        "late",
        "lost",
    }


def test_a_lost_claim_gives_its_slot_back_and_its_outcome_is_dropped() -> None:
    """The heartbeat found the claim gone (an operator cancelled the running job): the slot is
    free at once, the handler is told, and what it returns is dropped."""
    claims, _ = book()
    running, waiting = claimed(1), claimed(2)
    claims.add(running)
    claims.add(waiting)
    claims.start(running, timeout=None)

    assert claims.lose(running) == (ClaimState.RUNNING, None)
    assert claims.lose(waiting) == (ClaimState.WAITING, None)

    assert claims.held()[0] == 0
    assert claims.is_lost(running) and not claims.is_lost(waiting)
    assert claims.start(waiting, timeout=None) is None  # a lost prefetched job never starts
    assert claims.claim_outcome(running) is False
    assert claims.drop_late_outcome(running) is ClaimState.LOST
    assert claims.counts_by_queue() == (Counter(), Counter())


def test_a_job_claimed_again_while_its_late_handler_runs_keeps_each_claim_apart() -> None:
    """Nacked as timed out, the job may come back to this worker before its first handler
    ends: that handler's outcome is dropped, and the new claim runs as any other."""
    claims, _ = book()
    first = claimed(1)
    claims.add(first)
    claims.start(first, timeout=0)
    claims.expire_overdue(math.inf)
    claims.finish(first)  # nacked: LATE
    again = dataclasses.replace(first, claim_token="t2", attempts=2)
    claims.add(again)
    claims.start(again, timeout=None)

    assert not claims.claim_outcome(first), "the late handler's outcome is dropped"
    claims.drop_late_outcome(first)
    assert claims.claim_outcome(again)
    assert claims.held()[0] == 1
