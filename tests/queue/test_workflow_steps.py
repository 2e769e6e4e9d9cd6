"""Workflow steps (workflows.sql): a run is a job whose handler records each step it completes
with record_step, fenced by its claim, in the transaction that checkpoints it; a resumed run
reads them back with workflow_steps. A step whose writes share that transaction commits
exactly once."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import pytest

from postkit import errors
from postkit.queue import QueueClient
from postkit.queue.records import Job
from tests.queue.conftest import WaitUntilBlocked, commit, rollback

Q = "orders"

Shift = Callable[[QueueClient, float], None]


@pytest.fixture
def clients(make_client: Callable[..., QueueClient]) -> tuple[QueueClient, QueueClient]:
    """An application and a worker, each on a connection of its own, and the table a
    transactional step writes to."""
    app, worker = make_client(), make_client()
    app.cursor.execute("CREATE TABLE IF NOT EXISTS step_effects (run_id bigint, step text)")
    commit(app)
    return app, worker


def claimed(app: QueueClient, worker: QueueClient, **pull: Any) -> Job:
    run_id = app.push(Q, {"order": 42})
    commit(app)
    job = worker.pull(Q, worker_id="w1", **pull)
    assert job is not None and job.id == run_id
    commit(worker)
    return job


def effects(client: QueueClient, run_id: int) -> list[str]:
    client.cursor.execute(
        "SELECT step FROM step_effects WHERE run_id = %s ORDER BY step", (run_id,)
    )
    rows = [str(row[0]) for row in client.cursor.fetchall()]
    rollback(client)
    return rows


def transactional_step(worker: QueueClient, job: Job, position: int, name: str) -> bool:
    """A transactional step: its write and its checkpoint in one transaction, rolled back when
    the checkpoint is refused."""
    worker.cursor.execute("INSERT INTO step_effects VALUES (%s, %s)", (job.id, name))
    try:
        recorded = worker.record_step(job, position, name, {"done": name})
    except errors.WorkflowStepError:
        rollback(worker)
        raise
    if recorded:
        commit(worker)
    else:
        rollback(worker)
    return recorded


def test_the_steps_a_run_records_are_read_back_in_order(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    app, worker = clients
    job = claimed(app, worker)

    assert worker.record_step(job, 0, "charge", {"id": "ch_1"})
    assert worker.record_step(job, 1, "notify")
    commit(worker)

    steps = app.workflow_steps(job.id)
    assert [(s.position, s.name, s.result, s.attempt) for s in steps] == [
        (0, "charge", {"id": "ch_1"}, 1),
        (1, "notify", None, 1),
    ]
    assert app.workflow_steps(job.id + 1000) == []


def test_a_transactional_step_commits_once_with_its_checkpoint(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    app, worker = clients
    job = claimed(app, worker)

    assert transactional_step(worker, job, 0, "record")
    # The same step again (a replay that did not read its checkpoint): refused, and its write
    # rolls back with it.
    with pytest.raises(errors.WorkflowStepError, match="recorded already"):
        transactional_step(worker, job, 0, "record")

    assert effects(app, job.id) == ["record"]


def test_a_stale_claim_records_no_step_and_its_writes_roll_back(
    clients: tuple[QueueClient, QueueClient], shift_clock: Shift
) -> None:
    app, worker = clients
    job = claimed(app, worker, visibility_timeout=1)
    shift_clock(app, 5)
    assert app.tick_timeouts() == 1
    commit(app)

    assert transactional_step(worker, job, 0, "record") is False

    assert effects(app, job.id) == [] and app.workflow_steps(job.id) == []


def test_steps_are_recorded_in_order_and_in_range(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    app, worker = clients
    job = claimed(app, worker)

    with pytest.raises(errors.WorkflowStepError, match="position must be from 0 to 99999"):
        worker.record_step(job, -1, "charge")  # refused before anything is sent
    with pytest.raises(errors.WorkflowStepError, match="no step 0 recorded"):
        worker.record_step(job, 1, "notify")
    rollback(worker)
    assert app.workflow_steps(job.id) == []


def test_a_cancel_waits_for_a_checkpoint_in_progress_and_then_ends_the_run(
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    worker.cursor.execute("INSERT INTO step_effects VALUES (%s, 'record')", (job.id,))
    assert worker.record_step(job, 0, "record")  # holds the run's row until it commits

    cancelled = executor.submit(app.cancel, job.id)
    wait_until_blocked(app, worker, cancelled)
    commit(worker)

    assert cancelled.result(timeout=10) is True
    commit(app)
    assert effects(app, job.id) == ["record"]
    assert not worker.record_step(job, 1, "notify")  # the claim ended with the cancel
    rollback(worker)


def test_a_checkpoint_after_a_cancel_is_refused(
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    assert app.cancel(job.id)  # holds the run's row until it commits

    recorded = executor.submit(transactional_step, worker, job, 0, "record")
    wait_until_blocked(worker, app, recorded)
    commit(app)

    assert recorded.result(timeout=10) is False
    assert effects(app, job.id) == []


def test_a_finished_runs_steps_are_kept_for_its_queues_retention_then_pruned(
    clients: tuple[QueueClient, QueueClient], shift_clock: Shift
) -> None:
    app, worker = clients
    app.configure_queue(Q, retain_dead=3600)
    commit(app)
    live, finished = claimed(app, worker), claimed(app, worker)
    for job in (live, finished):
        assert worker.record_step(job, 0, "charge")
    assert worker.ack(finished)
    commit(worker)

    shift_clock(app, 3601)
    assert app.prune().steps == 1
    commit(app)

    assert app.workflow_steps(finished.id) == []
    assert [step.name for step in app.workflow_steps(live.id)] == ["charge"]


def test_a_parked_run_is_pending_from_its_wake_time_with_its_attempt_given_back(
    clients: tuple[QueueClient, QueueClient], shift_clock: Shift
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    until = worker.clock() + timedelta(hours=1)

    assert worker.park(job, until)
    commit(worker)

    parked = app.get_job(job.id)
    assert parked is not None
    assert (parked.attempts, parked.run_at) == (0, until)
    assert app.result(job.id).state == "scheduled"
    assert worker.pull(Q, worker_id="w1") is None  # not due yet
    assert not worker.park(job, until)  # the claim ended with the park
    shift_clock(worker, 3601)
    woken = worker.pull(Q, worker_id="w1")
    assert woken is not None and (woken.id, woken.attempts) == (job.id, 1)


def deadline_step(worker: QueueClient, job: Job, seconds: float) -> datetime:
    """Record a wait's deadline as step 0, as ctx.wait_for does, and return it."""
    until = worker.clock() + timedelta(seconds=seconds)
    assert worker.record_step(job, 0, "wait_for", {"event": "go", "until": until.isoformat()})
    return until


def test_an_event_sent_while_the_run_parks_wakes_it(
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    until = deadline_step(worker, job, 3600)
    assert worker.wait_event(job, 1, "go", until) == ("parked", None)  # holds the run's row

    sent = executor.submit(app.send_event, job.id, "go", {"n": 1})
    wait_until_blocked(app, worker, sent)
    commit(worker)

    assert sent.result(timeout=10) is True
    commit(app)
    woken = app.get_job(job.id)
    assert woken is not None and woken.run_at is not None and woken.run_at < until
    again = worker.pull(Q, worker_id="w2")
    assert again is not None and again.id == job.id
    assert worker.wait_event(again, 1, "go", until) == ("received", {"n": 1})
    commit(worker)


def test_a_run_that_waits_while_its_event_is_sent_takes_it(
    clients: tuple[QueueClient, QueueClient],
    executor: ThreadPoolExecutor,
    wait_until_blocked: WaitUntilBlocked,
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    until = deadline_step(worker, job, 0.001)  # the deadline passes as the event is sent
    commit(worker)
    assert app.send_event(job.id, "go", {"n": 2})  # holds the run's row until it commits

    waited = executor.submit(worker.wait_event, job, 1, "go", until)
    wait_until_blocked(worker, app, waited)
    commit(app)

    assert waited.result(timeout=10) == ("received", {"n": 2})
    commit(worker)


def test_cancelling_a_run_cancels_its_maps_jobs_and_skips_entries_that_are_not_job_ids(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    label = app.push("labels", {"item": 1})
    other = app.push("labels", {"item": 2})
    commit(app)
    # Written in SQL: the SDK would refuse 1e400.
    listed = f'["7", 1e400, 99999999999999999999, true, null, -3, 2.5, {label}, {{"id": {other}}}]'
    worker.cursor.execute(
        "SELECT postkit_queue.record_step(%s, %s, %s, 0, 'map', jsonb_build_object("
        "'queue', 'labels', 'jobs', %s::jsonb))",
        (worker.namespace, job.id, job.claim_token, listed),
    )
    commit(worker)

    assert app.cancel_run(job.id) == 2
    commit(app)
    states = [app.result(job_id).state for job_id in (job.id, label, other)]
    assert states == ["cancelled", "cancelled", "pending"]
    assert app.cancel_run(job.id) == 0


def test_cancelling_a_run_stops_at_its_limit_and_goes_on_at_the_next_call(
    clients: tuple[QueueClient, QueueClient],
) -> None:
    app, worker = clients
    job = claimed(app, worker)
    labels = [app.push("labels", {"item": n}) for n in range(3)]
    commit(app)
    assert worker.record_step(job, 0, "map", {"queue": "labels", "jobs": labels})
    commit(worker)

    assert [app.cancel_run(job.id, limit=2) for _ in range(3)] == [2, 2, 0]
    commit(app)
    assert {app.result(job_id).state for job_id in (job.id, *labels)} == {"cancelled"}
