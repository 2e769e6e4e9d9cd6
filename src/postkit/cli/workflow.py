"""``postkit workflow``: follow a workflow run's steps, or cancel the run."""

from __future__ import annotations

import click

from postkit.cli.console import confirm, connect, namespace_argument
from postkit.cli.options import operation, yes_option
from postkit.cli.output import (
    JOB_ID,
    compact_json,
    echo_json,
    format_time,
    plural,
    render_table,
    shorten,
)
from postkit.queue.records import to_jsonable


@click.group("workflow")
def workflow_group() -> None:
    """Follow a workflow run, or cancel it.

    A run is a job of its workflow's queue (`@app.workflow(queue=...)`): RUN is its id, as
    the push returned it.

    \b
    Example:
      postkit workflow show 42
      postkit workflow cancel 42
    """


@workflow_group.command("show")
@click.argument("run_id", metavar="RUN", type=JOB_ID)
@operation
def show(run_id: int, namespace: str, dsn: str | None, as_json: bool) -> None:
    """The run RUN: where it is (as `postkit job` says it), and each step it recorded, in
    order: its name, the attempt that recorded it, when, and its result. A run's steps are
    kept while it is live, and for its queue's retention once it finished.

    --json prints {"run": what QueueClient.result returns, "steps": [...]}.

    \b
    Example:
      postkit workflow show 42
      postkit workflow show 42 --json
    """
    with connect(dsn, namespace) as (_, client):
        result = client.result(run_id)
        steps = client.workflow_steps(run_id)
    if result.state == "unknown" and not steps:
        raise click.ClickException(
            f"no run {run_id} in namespace {namespace!r}: never pushed, in another namespace, "
            "or finished with its record pruned"
        )
    if as_json:
        echo_json({"run": to_jsonable(result), "steps": to_jsonable(steps)})
        return
    state = result.state if result.reason is None else f"{result.state} ({result.reason})"
    click.echo(
        f"Run {run_id} of queue {result.queue or '?'}: {state}, {plural(len(steps), 'step')}"
    )
    if steps:
        rows = [
            [
                step.position,
                step.name,
                step.attempt,
                format_time(step.recorded_at),
                shorten(compact_json(step.result), 60)
                if step.result_error is None
                else f"({step.result_error})",
            ]
            for step in steps
        ]
        click.echo(
            render_table(
                ["STEP", "NAME", "ATTEMPT", "RECORDED (UTC)", "RESULT"],
                rows,
                right=["STEP", "ATTEMPT"],
            )
        )


@workflow_group.command("cancel")
@click.argument("run_id", metavar="RUN", type=JOB_ID)
@yes_option
@operation
def cancel(run_id: int, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Cancel the run RUN, whatever it is doing: a running run's claim ends at once (its
    worker is told, its current step's checkpoint is refused and a transactional step's writes
    roll back), a sleeping or waiting one never wakes, and the live jobs of its tree (the jobs
    that wait for it, and theirs) and of its maps are cancelled with it. Asks first, unless
    --yes.

    \b
    Example:
      postkit workflow cancel 42
      postkit workflow cancel 42 --yes --json
    """
    with connect(dsn, namespace) as (connection, client):
        result = client.result(run_id)
        connection.rollback()
        if result.state not in ("pending", "scheduled", "running", "waiting"):
            raise click.ClickException(
                f"run {run_id} is not live in namespace {namespace!r} ({result.state}): nothing "
                f"to cancel (see `postkit workflow show {run_id}{namespace_argument(namespace)}`)"
            )
        confirm(f"Cancel run {run_id} of queue {result.queue} ({result.state})?", yes)
        cancelled = 0
        while done := client.cancel_run(run_id):
            connection.commit()
            cancelled += done
    if as_json:
        echo_json({"id": run_id, "cancelled": cancelled})
    else:
        click.echo(
            f"Cancelled run {run_id} and {plural(max(cancelled - 1, 0), 'job')} of its tree."
        )
