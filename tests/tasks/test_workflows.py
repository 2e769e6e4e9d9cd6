"""Workflows run by a real worker: a run is a job whose function calls its steps through a
WorkflowContext; each step completed is recorded, and a run that runs again replays the
recorded steps instead of running them. A transactional step's writes commit exactly once, with
its checkpoint; a replay that meets a renamed step fails the run for good."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import sql

from postkit.cli import main
from postkit.errors import InvalidArgumentsError, RetryLater, WorkflowEventError
from postkit.queue import QueueClient
from postkit.tasks import App, AsyncWorkflowContext, Workflow, WorkflowContext
from postkit.testing import drain
from tests.signals import wait_until
from tests.tasks.test_tasks_worker import dead, gone

StartWorker = Callable[..., Any]


@pytest.fixture
def table(connect: Callable[..., psycopg.Connection[Any]]) -> Iterator[sql.Identifier]:
    """A table a transactional step writes to: one row per (order, step), so that a second
    write of one fails."""
    admin = connect(autocommit=True)
    name = sql.Identifier(f"workflow_test_{uuid.uuid4().hex[:12]}")
    admin.execute(
        sql.SQL("CREATE TABLE {} (order_id text, step text, PRIMARY KEY (order_id, step))").format(
            name
        )
    )
    yield name
    admin.execute(sql.SQL("DROP TABLE {}").format(name))


def written(client: QueueClient, table: sql.Identifier) -> list[tuple[str, str]]:
    client.cursor.execute(sql.SQL("SELECT order_id, step FROM {} ORDER BY 1, 2").format(table))
    return [tuple(row) for row in client.cursor.fetchall()]  # type: ignore[misc]


def test_the_context_is_no_argument_of_the_push(app: App, client: QueueClient) -> None:
    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext, order_id: str) -> str:
        return order_id

    assert isinstance(fulfil, Workflow)
    run_id = fulfil.push(client.cursor, order_id="42")
    assert run_id is not None
    job = client.get_job(run_id)
    assert job is not None and job.payload == {"args": [], "kwargs": {"order_id": "42"}}

    with pytest.raises(InvalidArgumentsError, match="takes its context as its first parameter"):
        app.workflow(queue="nothing")(lambda: None)


def test_a_retried_run_replays_its_recorded_steps_and_runs_the_rest(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("orders", retain_results=3600)
    runs: Counter[str] = Counter()

    def charge(order_id: str) -> dict[str, str]:
        runs["charge"] += 1
        return {"id": f"ch_{order_id}"}

    def ship(order_id: str) -> tuple[str, int]:
        runs["ship"] += 1
        if runs["ship"] == 1:
            raise RetryLater("the carrier is down", delay=0)
        return (order_id, 2)

    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext, order_id: str) -> list[Any]:
        charged = ctx.step("charge", charge, order_id)
        shipped = ctx.step("ship", ship, order_id)
        return [charged["id"], shipped]

    start_worker(app)
    run_id = fulfil.push(client.cursor, order_id="42")
    assert run_id is not None

    wait_until(gone(client, run_id), "the run to complete")
    assert client.result(run_id).value == ["ch_42", ["42", 2]]  # the tuple, as JSON gives it
    assert runs == {"charge": 1, "ship": 2}
    steps = client.workflow_steps(run_id)
    assert [(s.position, s.name, s.result, s.attempt) for s in steps] == [
        (0, "charge", {"id": "ch_42"}, 1),
        (1, "ship", ["42", 2], 2),
    ]


def test_a_transactional_steps_writes_commit_once_however_often_the_run_runs(
    app: App, start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    attempts: Counter[str] = Counter()

    def record(cursor: psycopg.Cursor[Any], order_id: str, step: str) -> str:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(table), (order_id, step))
        return step

    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext, order_id: str) -> None:
        ctx.transaction("reserve", record, order_id, "reserve")
        attempts[order_id] += 1
        if attempts[order_id] < 3:
            raise RetryLater("not yet", delay=0)
        ctx.transaction("invoice", record, order_id, "invoice")

    start_worker(app)
    run_id = fulfil.push(client.cursor, order_id="7")

    wait_until(gone(client, run_id), "the run to complete")
    assert written(client, table) == [("7", "invoice"), ("7", "reserve")]
    assert attempts["7"] == 3


def test_a_replay_that_meets_a_renamed_step_fails_the_run_for_good(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    names = iter(["charge", "charge_card"])

    @app.workflow(queue="orders", max_attempts=5)
    def fulfil(ctx: WorkflowContext, order_id: str) -> None:
        ctx.step(next(names), lambda: None)  # the code changed between two attempts
        raise RetryLater("again", delay=0)

    start_worker(app)
    run_id = fulfil.push(client.cursor, order_id="1")
    assert run_id is not None

    job = dead(client, run_id)
    assert job.attempts == 2
    assert "reached step 0 as 'charge_card', which it recorded as 'charge'" in str(
        job.errors[-1]["error"]
    )


def test_a_step_whose_result_cannot_be_recorded_fails_the_run(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    @app.workflow(queue="orders", max_attempts=1)
    def fulfil(ctx: WorkflowContext, order_id: str) -> None:
        ctx.step("charge", lambda: object())

    start_worker(app)
    run_id = fulfil.push(client.cursor, order_id="1")
    assert run_id is not None

    job = dead(client, run_id)
    assert "not JSON-serializable" in str(job.errors[-1]["error"])
    assert client.workflow_steps(run_id) == []


def test_a_sleeping_run_holds_no_slot_and_wakes_to_go_on(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("orders", retain_results=3600)
    done: list[str] = []

    @app.workflow(queue="orders", max_attempts=1)
    def remind(ctx: WorkflowContext, user: str) -> str:
        ctx.step("welcome", done.append, f"welcome {user}")
        ctx.sleep(1.5)
        ctx.step("remind", done.append, f"remind {user}")
        return user

    @app.task(queue="orders_other")
    def other() -> None:
        done.append("other")

    start_worker(app, concurrency=1)
    run_id = remind.push(client.cursor, user="ada")
    assert run_id is not None
    wait_until(lambda: client.result(run_id).state == "scheduled", "the run to park")
    other.push(client.cursor)  # the one slot is free while the run sleeps
    wait_until(lambda: "other" in done, "the other job to run")
    job = client.get_job(run_id)
    assert job is not None and job.attempts == 0  # a sleep spends no attempt

    # The worker sleeps until the queue's next due job: the run, once its time comes.
    wait_until(lambda: client.result(run_id).state == "completed", "the run to wake and finish")
    assert done == ["welcome ada", "other", "remind ada"]


def test_an_event_wakes_a_waiting_run_and_one_sent_first_is_kept_for_it(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("signups", retain_results=3600)

    @app.workflow(queue="signups")
    def signup(ctx: WorkflowContext, email: str) -> Any:
        return ctx.wait_for("confirmed", timeout=3600)

    early = signup.push(client.cursor, email="early@example.com")
    assert early is not None
    assert app.send_event(client.cursor, early, "confirmed", {"at": "first"})
    start_worker(app)
    wait_until(lambda: client.result(early).state == "completed", "the early run to finish")
    assert client.result(early).value == {"at": "first"}

    late = signup.push(client.cursor, email="late@example.com")
    assert late is not None
    wait_until(lambda: client.result(late).state == "scheduled", "the run to wait, parked")
    assert app.send_event(client.cursor, late, "confirmed", {"at": "later"}, key="mail-1")
    assert not app.send_event(client.cursor, late, "confirmed", {"at": "later"}, key="mail-1")
    # Woken by the event at once, not at its deadline an hour from now.
    wait_until(lambda: client.result(late).state == "completed", "the event to wake the run")
    assert client.result(late).value == {"at": "later"}
    assert [step.name for step in client.workflow_steps(late)] == ["wait_for", "event"]


def test_a_wait_past_its_deadline_returns_none(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("signups", retain_results=3600)

    @app.workflow(queue="signups")
    def signup(ctx: WorkflowContext, email: str) -> str:
        confirmation = ctx.wait_for("confirmed", timeout=0.5)
        return "reminded" if confirmation is None else "confirmed"

    start_worker(app)
    run_id = signup.push(client.cursor, email="ada@example.com")
    assert run_id is not None

    wait_until(lambda: client.result(run_id).state == "completed", "the deadline to pass")
    assert client.result(run_id).value == "reminded"


def test_an_event_for_a_run_that_is_not_live_is_refused(app: App, client: QueueClient) -> None:
    @app.workflow(queue="signups")
    def signup(ctx: WorkflowContext) -> None: ...

    run_id = signup.push(client.cursor)
    assert run_id is not None
    assert app.send_event(client.cursor, run_id, "confirmed")
    with pytest.raises(WorkflowEventError, match="has an event confirmed already"):
        app.send_event(client.cursor, run_id, "confirmed", {"again": True})
    with pytest.raises(WorkflowEventError, match="is not live"):
        app.send_event(client.cursor, run_id + 1000, "confirmed")


def test_postkit_workflow_shows_a_runs_steps_and_cancels_a_waiting_run(
    app: App, start_worker: StartWorker, client: QueueClient, dsn: str, namespace: str
) -> None:
    @app.workflow(queue="signups")
    def signup(ctx: WorkflowContext, email: str) -> None:
        ctx.step("account", lambda: {"id": 7})
        ctx.wait_for("confirmed", timeout=3600)

    start_worker(app)
    run_id = signup.push(client.cursor, email="ada@example.com")
    assert run_id is not None
    wait_until(lambda: client.result(run_id).state == "scheduled", "the run to wait")
    options = ["--dsn", dsn, "--namespace", namespace]

    shown = CliRunner().invoke(main, ["workflow", "show", str(run_id), *options])
    assert shown.exit_code == 0, shown.output
    assert f"Run {run_id} of queue signups: scheduled, 2 steps" in shown.output
    assert "account" in shown.output and '{"id": 7}' in shown.output
    listed = json.loads(
        CliRunner().invoke(main, ["workflow", "show", str(run_id), "--json", *options]).output
    )
    assert [step["name"] for step in listed["steps"]] == ["account", "wait_for"]

    status = app.run_status(client.cursor, run_id)
    assert (status.state, [step.name for step in status.steps]) == (
        "scheduled",
        ["account", "wait_for"],
    )
    cancelled = CliRunner().invoke(main, ["workflow", "cancel", str(run_id), "--yes", *options])
    assert cancelled.exit_code == 0, cancelled.output
    assert client.result(run_id).state == "cancelled"
    again = CliRunner().invoke(main, ["workflow", "cancel", str(run_id), "--yes", *options])
    assert again.exit_code == 1 and "is not live" in again.output


def test_a_map_fans_out_waits_without_a_slot_and_returns_the_results_in_order(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("orders", retain_results=3600)

    @app.task(queue="labels", retain_results=3600)
    def print_label(item: int) -> str:
        return f"label-{item}"

    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext, items: list[int]) -> list[str]:
        return ctx.map(print_label, [{"item": item} for item in items])

    start_worker(app, concurrency=1)  # the run waits without its slot: the labels get it
    run_id = fulfil.push(client.cursor, items=[3, 1, 2])
    assert run_id is not None

    wait_until(lambda: client.result(run_id).state == "completed", "the map to complete")
    assert client.result(run_id).value == ["label-3", "label-1", "label-2"]
    steps = client.workflow_steps(run_id)
    assert [step.name for step in steps] == ["map", "map_results"]
    assert [client.result(job_id).state for job_id in steps[0].result["jobs"]] == ["completed"] * 3
    job = client.get_job(run_id)
    assert job is None  # completed: no row left


def test_cancelling_a_run_cancels_the_jobs_of_its_map(
    app: App, make_client: Callable[..., QueueClient]
) -> None:
    client = make_client()  # in a transaction, as drain works

    @app.task(queue="labels", retain_results=3600)
    def print_label(item: int) -> str:
        return f"label-{item}"

    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext) -> list[str]:
        return ctx.map(print_label, [{"item": 1}, {"item": 2}])

    run_id = fulfil.push(client.cursor)
    assert run_id is not None
    drain(client, app, "orders")  # the run maps and waits; its labels are left pending
    labels = client.workflow_steps(run_id)[0].result["jobs"]
    assert client.result(run_id).state == "waiting"

    assert app.cancel_run(client.cursor, run_id) == 3
    assert [client.result(job_id).state for job_id in (run_id, *labels)] == ["cancelled"] * 3


def test_a_map_of_a_task_whose_queue_keeps_no_results_fails_the_run_and_says_why(
    app: App, make_client: Callable[..., QueueClient]
) -> None:
    client = make_client()

    @app.task(queue="labels")
    def print_label(item: int) -> str:
        return f"label-{item}"

    @app.workflow(queue="orders")
    def fulfil(ctx: WorkflowContext) -> list[str]:
        return ctx.map(print_label, [{"item": 1}])

    run_id = fulfil.push(client.cursor)
    assert run_id is not None
    drain(client, app, "orders")

    result = client.result(run_id)
    assert result.state == "dead"
    assert "queue labels, which keeps no results" in str(result.error)
    assert "retain_results" in str(result.error)


def test_an_async_workflow_awaits_its_steps_sleeps_and_waits(
    app: App, start_worker: StartWorker, client: QueueClient, table: sql.Identifier
) -> None:
    client.configure_queue("orders", retain_results=3600)

    async def charge(order_id: str) -> dict[str, str]:
        await asyncio.sleep(0)
        return {"id": f"ch_{order_id}"}

    def record(cursor: psycopg.Cursor[Any], order_id: str) -> None:
        cursor.execute(sql.SQL("INSERT INTO {} VALUES (%s, 'record')").format(table), (order_id,))

    @app.workflow(queue="orders")
    async def fulfil(ctx: AsyncWorkflowContext, order_id: str) -> list[Any]:
        charged = await ctx.step("charge", charge, order_id)
        await ctx.transaction("record", record, order_id)
        await ctx.sleep(0.2)
        approval = await ctx.wait_for("approved", timeout=0.2)
        return [charged["id"], approval]

    start_worker(app)
    run_id = fulfil.push(client.cursor, order_id="9")
    assert run_id is not None

    wait_until(lambda: client.result(run_id).state == "completed", "the async run to finish")
    assert client.result(run_id).value == ["ch_9", None]
    assert written(client, table) == [("9", "record")]
    assert [step.name for step in client.workflow_steps(run_id)] == [
        "charge",
        "record",
        "sleep",
        "wait_for",
        "event",
    ]


def test_a_run_that_fails_after_fifty_steps_replays_them_without_running_them(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("orders", retain_results=3600)
    runs: Counter[int] = Counter()
    attempts: list[int] = []

    def count(step: int) -> int:
        runs[step] += 1
        return step

    @app.workflow(queue="orders")
    def long(ctx: WorkflowContext) -> int:
        total = sum(ctx.step(f"step {step}", count, step) for step in range(50))
        attempts.append(ctx.job.attempts)
        if len(attempts) == 1:
            raise RetryLater("once more", delay=0)
        return total

    start_worker(app)
    run_id = long.push(client.cursor)
    assert run_id is not None

    wait_until(lambda: client.result(run_id).state == "completed", "the replayed run to finish")
    assert client.result(run_id).value == sum(range(50))
    assert attempts == [1, 2] and set(runs.values()) == {1}  # each step ran once


def test_a_map_of_a_thousand_jobs_returns_each_result_in_order(
    app: App, start_worker: StartWorker, client: QueueClient
) -> None:
    client.configure_queue("orders", retain_results=3600)

    @app.task(queue="labels", retain_results=3600)
    def label(item: int) -> int:
        return item * 3

    @app.workflow(queue="orders")
    def fan(ctx: WorkflowContext) -> list[int]:
        return ctx.map(label, [{"item": item} for item in range(1000)])

    start_worker(app, concurrency=16)
    run_id = fan.push(client.cursor)
    assert run_id is not None

    wait_until(lambda: client.result(run_id).state == "completed", "the map of 1,000 to finish", 60)
    assert client.result(run_id).value == [item * 3 for item in range(1000)]
