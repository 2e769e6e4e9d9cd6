"""postkit.testing's helpers, called as a user's test calls them: drain runs handlers inline with
the worker's outcome rules and skips backoffs on the queue's clock; assert_pushed and
pushed_jobs read what is queued."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from postkit.errors import PermanentError, RetryLater
from postkit.queue import Job, QueueClient
from postkit.tasks import App
from postkit.testing import DrainLimitError, assert_pushed, drain, pushed_jobs
from postkit.worker import Handlers


def test_drain_acks_a_job_whose_handler_returns_and_keeps_what_it_returned(
    queue: QueueClient,
) -> None:
    handlers = Handlers({"mail": lambda job: {"sent": job.payload["to"]}})
    job_id = queue.push("mail", {"to": "ada"})

    drained = drain(queue, handlers)

    assert drained[job_id].state == "completed"
    assert drained[job_id].result == {"sent": "ada"}
    assert (drained[job_id].attempts, drained[job_id].retries) == (1, 0)
    assert pushed_jobs(queue, "mail") == []


def test_a_handler_that_always_raises_ends_dead_after_its_attempts_without_waiting_backoff(
    queue: QueueClient,
) -> None:
    def broken(job: Job) -> None:
        raise ValueError(f"cannot send to {job.payload['to']}")

    job_id = queue.push("mail", {"to": "ada"}, max_attempts=4)

    drained = drain(queue, Handlers({"mail": broken}))

    record = drained[job_id]
    assert (record.state, record.attempts, record.retries) == ("dead", 4, 3)
    assert len(record.errors) == 4
    assert record.error is not None and record.error.startswith("ValueError: cannot send to ada")
    (dead,) = queue.dead_letters("mail")
    assert dead.job_id == job_id


def test_drain_puts_the_queue_clock_back_when_it_returns(queue: QueueClient) -> None:
    def broken(job: Job) -> None:
        raise RetryLater("not yet", delay=timedelta(days=30))

    queue.push("mail", {"to": "ada"}, max_attempts=2)

    drain(queue, Handlers({"mail": broken}))

    assert abs(queue.clock() - datetime.now(timezone.utc)) < timedelta(minutes=5)


def test_a_permanent_error_dead_letters_the_job_at_its_first_attempt(queue: QueueClient) -> None:
    def refuse(job: Job) -> None:
        raise PermanentError("no such user")

    job_id = queue.push("mail", {"to": "nobody"})

    record = drain(queue, Handlers({"mail": refuse}))[job_id]

    assert (record.state, record.attempts) == ("dead", 1)
    assert record.error is not None and record.error.startswith("PermanentError: no such user")


def test_retry_later_retries_after_its_delay_on_the_moved_clock(queue: QueueClient) -> None:
    runs: list[datetime] = []

    def later_once(job: Job) -> str:
        runs.append(queue.clock())
        if len(runs) == 1:
            raise RetryLater("busy", delay=3600)
        return "sent"

    job_id = queue.push("mail", {"to": "ada"})

    record = drain(queue, Handlers({"mail": later_once}))[job_id]

    assert (record.state, record.retries, record.result) == ("completed", 1, "sent")
    assert runs[1] - runs[0] >= timedelta(seconds=3600)


def test_a_transactional_handlers_writes_roll_back_when_it_raises_and_stay_when_it_acks(
    conn: psycopg.Connection[Any], queue: QueueClient
) -> None:
    conn.execute("CREATE TEMPORARY TABLE sent (n int)")

    def write(job: Job, cursor: Any) -> None:
        cursor.execute("INSERT INTO sent VALUES (%s)", (job.attempts,))
        if job.attempts == 1:
            raise ValueError("fails after its write")

    handlers = Handlers()
    handlers.add("mail", write, transactional=True)
    job_id = queue.push("mail", {})

    record = drain(queue, handlers)[job_id]

    assert (record.state, record.retries) == ("completed", 1)
    assert conn.execute("SELECT n FROM sent").fetchall() == [(2,)]


def test_drain_runs_an_apps_tasks_in_its_namespace_under_its_queue_policies(
    conn: psycopg.Connection[Any], namespace: str
) -> None:
    app = App(namespace=f"{namespace}-app")
    calls: list[tuple[str, str]] = []

    @app.task(queue="welcome", max_attempts=2)
    def welcome(user_id: str, *, channel: str = "email") -> None:
        calls.append((user_id, channel))

    @app.task(queue="welcome_async")
    async def welcome_async(user_id: str) -> str:
        return f"hello {user_id}"

    cursor = conn.cursor()
    welcome.push(cursor, "42", channel="sms")
    async_id = welcome_async.push(cursor, user_id="7")
    other_namespace = QueueClient(cursor, namespace=namespace)

    drained = drain(other_namespace, app)

    assert calls == [("42", "sms")]
    assert async_id is not None and drained[async_id].result == "hello 7"
    assert {record.state for record in drained.values()} == {"completed"}
    assert QueueClient(cursor, app.namespace).queue_policy("welcome").max_attempts == 2


def test_drain_of_one_queue_leaves_the_others_alone(queue: QueueClient) -> None:
    handlers = Handlers({"mail": lambda job: None, "sms": lambda job: None})
    queue.push("mail", {})
    queue.push("sms", {})

    drain(queue, handlers, "mail")

    assert pushed_jobs(queue, "mail") == []
    assert len(pushed_jobs(queue, "sms")) == 1


def test_drain_stops_at_max_jobs_when_handlers_keep_pushing(queue: QueueClient) -> None:
    handlers = Handlers({"loop": lambda job: queue.push("loop", {}) and None})
    queue.push("loop", {})

    with pytest.raises(DrainLimitError) as raised:
        drain(queue, handlers, max_jobs=5)

    assert len(raised.value.jobs) == 5


def test_assert_pushed_finds_jobs_by_payload_and_count_and_says_what_is_queued(
    queue: QueueClient,
) -> None:
    queue.push("mail", {"to": "ada"})
    queue.push("mail", {"to": "ada"}, delay=60)
    queue.push("mail", {"to": "bob"})

    assert len(assert_pushed(queue, "mail", {"to": "ada"}, count=2)) == 2
    assert_pushed(queue, "mail")
    with pytest.raises(AssertionError, match=r"found 1; queued payloads: .*'bob'"):
        assert_pushed(queue, "mail", {"to": "bob"}, count=2)
    with pytest.raises(AssertionError, match="expected a job in queue 'sms'"):
        assert_pushed(queue, "sms")


def test_drain_refuses_async_handlers_inside_a_running_event_loop(queue: QueueClient) -> None:
    async def handler(job: Job) -> None:
        return None

    job_id = queue.push("mail", {})

    async def from_a_loop() -> None:
        drain(queue, Handlers({"mail": handler}))

    with pytest.raises(RuntimeError, match="outside a loop"):
        asyncio.run(from_a_loop())
    assert [job.id for job in pushed_jobs(queue, "mail")] == [job_id]


def test_drain_runs_a_workflow_through_its_sleep_on_the_moved_clock(queue: QueueClient) -> None:
    app = App(namespace=queue.namespace)
    calls: list[str] = []

    @app.workflow(queue="trials", retain_results=3600, max_attempts=1)
    def trial(ctx: Any, user: str) -> str:
        ctx.step("welcome", calls.append, f"welcome {user}")
        ctx.sleep(timedelta(days=14))
        ctx.step("remind", calls.append, f"remind {user}")
        return user

    run_id = trial.push(queue.cursor, user="ada")

    drained = drain(queue, app)

    assert calls == ["welcome ada", "remind ada"]  # each once, however often the run ran
    assert run_id is not None and drained[run_id].state == "completed"
    assert [step.name for step in queue.workflow_steps(run_id)] == ["welcome", "sleep", "remind"]


def test_drain_runs_a_workflows_map_and_the_jobs_it_pushed(queue: QueueClient) -> None:
    app = App(namespace=queue.namespace)

    @app.task(queue="squares", retain_results=3600)
    def square(n: int) -> int:
        return n * n

    @app.workflow(queue="sums", retain_results=3600)
    def total(ctx: Any, numbers: list[int]) -> int:
        return sum(ctx.map(square, [{"n": n} for n in numbers]))

    run_id = total.push(queue.cursor, numbers=[1, 2, 3])

    drained = drain(queue, app)

    assert run_id is not None and drained[run_id].state == "completed"
    assert drained[run_id].result == 14


def test_drain_runs_an_async_workflow(queue: QueueClient) -> None:
    app = App(namespace=queue.namespace)

    @app.workflow(queue="trials", retain_results=3600)
    async def trial(ctx: Any, user: str) -> str:
        greeting = await ctx.step("welcome", lambda: f"welcome {user}")
        await ctx.sleep(timedelta(days=1))
        return str(greeting)

    run_id = trial.push(queue.cursor, user="ada")

    drained = drain(queue, app)

    assert run_id is not None and drained[run_id].result == "welcome ada"
