"""Typed tasks, the worker's side: a real Worker runs an App's tasks with the arguments they
were pushed with, dead-letters a payload that does not fit, and an App writes its tasks' queue
policies as its worker starts."""

from __future__ import annotations

import logging
import queue as stdlib_queue
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from postkit.queue import Job, QueueClient
from postkit.queue.admin import grant_access
from postkit.tasks import App
from tests.signals import wait_until

StartWorker = Callable[..., Any]
JobOf = Callable[[int | None], Job]


def next_item(items: stdlib_queue.SimpleQueue[Any], what: str, timeout: float = 15.0) -> Any:
    try:
        return items.get(timeout=timeout)
    except stdlib_queue.Empty:
        pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")


def gone(client: QueueClient, job_id: int | None) -> Callable[[], bool]:
    assert job_id is not None
    return lambda: client.get_job(job_id) is None


def pushed_from_sql(client: QueueClient, queue: str, payload_text: str) -> int:
    """A payload pushed by hand, as another language's producer would."""
    client.cursor.execute(
        "SELECT postkit_queue.push(%s, %s, %s::jsonb)", (client.namespace, queue, payload_text)
    )
    job_id: int = client.cursor.fetchone()[0]
    return job_id


def dead(client: QueueClient, job_id: int) -> Job:
    return wait_until(
        lambda: (found := client.get_job(job_id)) is not None and found.state == "dead" and found,
        f"job {job_id} to be dead-lettered",
    )


def test_a_worker_runs_an_apps_tasks_with_the_arguments_they_were_pushed_with(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    calls: stdlib_queue.SimpleQueue[Any] = stdlib_queue.SimpleQueue()

    @app.task(queue="send_otp")
    def send_otp(user_id: str, *, channel: str = "whatsapp") -> None:
        calls.put(("send_otp", user_id, channel))

    @app.task(queue="resize")
    async def resize(path: str, *sizes: int) -> None:
        calls.put(("resize", path, sizes))

    start_worker(app)
    ids = [
        send_otp.push(client.cursor, "1"),
        send_otp.push(client.cursor, user_id="2", channel="sms"),
        *send_otp.push_many(client.cursor, [{"user_id": "3"}]),
        resize.push(client.cursor, "a.png", 64, 128),
    ]

    ran = {next_item(calls, "a task to run") for _ in ids}
    assert ran == {
        ("send_otp", "1", "whatsapp"),
        ("send_otp", "2", "sms"),
        ("send_otp", "3", "whatsapp"),
        ("resize", "a.png", (64, 128)),
    }
    for job_id in ids:
        wait_until(gone(client, job_id), f"job {job_id} to be acked")


@pytest.mark.parametrize(
    ("payload_text", "error"),
    [
        (
            '{"kwargs": {"uid": "1"}}',
            "PermanentError: the payload does not fit send_otp(user_id, *, channel='whatsapp'): "
            "got an unexpected keyword argument 'uid' (did you mean 'user_id'?)",
        ),
        (
            '{"user_id": "1"}',
            'PermanentError: the payload of task send_otp must be a JSON object {"args": [...], '
            '"kwargs": {...}}, got {"user_id": "1"}',
        ),
    ],
    ids=["does-not-fit", "not-the-shape"],
)
def test_a_payload_pushed_by_hand_that_does_not_fit_is_dead_lettered_at_once(
    app: App, start_worker: StartWorker, client: QueueClient, payload_text: str, error: str
) -> None:
    calls: stdlib_queue.SimpleQueue[str] = stdlib_queue.SimpleQueue()

    @app.task(queue="send_otp", max_attempts=5)
    def send_otp(user_id: str, *, channel: str = "whatsapp") -> None:
        calls.put(user_id)

    worker = start_worker(app)
    bad = pushed_from_sql(client, "send_otp", payload_text)

    job = dead(client, bad)
    [entry] = job.errors
    assert (entry["kind"], job.attempts) == ("fail", 1), "dead at once, without retries"
    assert entry["error"].startswith(error + "\n"), entry["error"]
    # The worker goes on: a job of the right shape, pushed by hand too, runs.
    good = pushed_from_sql(client, "send_otp", '{"kwargs": {"user_id": "7"}}')
    assert next_item(calls, "the good job to run") == "7"
    wait_until(gone(client, good), "the good job to be acked")
    assert worker.stats.dead_lettered == 1


def test_an_apps_worker_writes_its_tasks_queue_policies_as_it_starts_and_logs_them(
    app: App,
    start_worker: StartWorker,
    client: QueueClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.configure_queue("send_otp", backoff_cap=600, retain_dead=3600)  # an operator's

    @app.task(queue="send_otp", max_attempts=3, backoff_base=2, visibility_timeout=45, timeout=9)
    def send_otp(user_id: str) -> None: ...

    @app.task(queue="plain")
    def plain() -> None: ...

    with caplog.at_level(logging.INFO, logger="postkit.tasks"):
        start_worker(app)

    policy = client.queue_policy("send_otp")
    assert (policy.max_attempts, policy.backoff_base, policy.visibility_timeout) == (3, 2, 45)
    assert (policy.backoff_cap, policy.retain_dead) == (600, 3600), "the operator's stay"
    assert client.queue_policy("plain") == client.queue_policy("never-configured")
    [record] = [r for r in caplog.records if r.name == "postkit.tasks"]
    assert record.getMessage() == (
        "queue send_otp: applied the policy of task send_otp (max_attempts 3, backoff_base 2, "
        "visibility_timeout 45); in force: max attempts 3, visibility timeout 45s, backoff 2s "
        "doubling up to 600s"
    )
    assert app.handlers["send_otp"].timeout == 9, "the task's timeout is its handler's"
    # A job pushed another way (by hand, here) gets the queue's max_attempts.
    assert client.get_job(pushed_from_sql(client, "send_otp", '{"args": ["1"]}')).max_attempts == 3  # type: ignore[union-attr]


def test_apply_policies_writes_in_the_callers_transaction(
    app: App, conn: psycopg.Connection[Any], client: QueueClient
) -> None:
    @app.task(queue="send_otp", max_attempts=4)
    def send_otp(user_id: str) -> None: ...

    applied = app.apply_policies(conn.cursor())
    assert applied["send_otp"].max_attempts == 4
    assert client.queue_policy("send_otp").max_attempts == 20, "not before the commit"
    conn.rollback()

    assert client.queue_policy("send_otp").max_attempts == 20


@pytest.fixture
def worker_role(dsn: str) -> Iterator[str]:
    """A role with worker access only (no operator verbs), dropped afterwards."""
    role = f"postkit_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
        grant_access(admin.cursor(), role, "worker")
    yield role
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_role_without_operator_access_starts_with_a_warning_and_changes_no_policy(
    app: App, dsn: str, worker_role: str, client: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="send_otp", max_attempts=3)
    def send_otp(user_id: str) -> None: ...

    as_worker = psycopg.conninfo.make_conninfo(dsn, options=f"-c role={worker_role}")
    with caplog.at_level(logging.WARNING, logger="postkit.tasks"):
        applied = app.configure_queues(as_worker)

    assert applied == {}
    assert client.queue_policy("send_otp").max_attempts == 20
    [record] = [r for r in caplog.records if r.name == "postkit.tasks"]
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith(
        "could not apply the tasks' queue policies (send_otp: max_attempts 3): permission "
        "denied for function configure_queue"
    )


def test_a_task_that_keeps_results_writes_the_queues_retention_and_its_value_is_kept(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    @app.task(queue="totals", retain_results=3600)
    def total(*amounts: float) -> float:
        return sum(amounts)

    start_worker(app)
    job_id = total.push(client.cursor, 1.5, 2.5)
    assert job_id is not None

    assert client.wait_for_result(job_id, timeout=15).value == 4.0
    assert client.queue_policy("totals").retain_results == 3600


def test_a_value_returned_on_a_queue_that_keeps_no_results_is_reported_once(
    app: App, start_worker: StartWorker, client: QueueClient, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task(queue="totals")
    def total(*amounts: float) -> float:
        return sum(amounts)

    with caplog.at_level(logging.WARNING, logger="postkit.worker"):
        start_worker(app, concurrency=1)
        ids = [total.push(client.cursor, n) for n in (1, 2, 3)]
        for job_id in ids:
            wait_until(gone(client, job_id), f"job {job_id} to be acked")

    discarded = [r for r in caplog.records if getattr(r, "event", None) == "results_discarded"]
    assert len(discarded) == 1
    assert "retain_results" in discarded[0].getMessage()
    assert client.result(ids[0]).state == "unknown"
