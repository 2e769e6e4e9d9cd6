"""``postkit schedule``: create, list, pause, resume and delete recurring jobs."""

from __future__ import annotations

import json
from datetime import timedelta

import click

from postkit.cli.console import (
    confirm,
    connect,
    namespace_argument,
    payload_text,
    require_known_queue,
)
from postkit.cli.options import bounded, operation, yes_option
from postkit.cli.output import (
    DURATION,
    echo_json,
    first_line,
    format_duration,
    format_time,
    printable,
    render_table,
    shorten,
)
from postkit.queue import QueueClient, limits
from postkit.queue.protocol.scheduling import new_schedule as check_schedule
from postkit.queue.records import Schedule


@click.group()
def schedule() -> None:
    """Recurring jobs: push a payload to a queue on a cron expression or every interval.

    Schedules fire when something ticks: every `postkit worker` does, and so does
    `postkit tick`. Runs missed while nothing ticked collapse into one.

    \b
    Example:
      postkit schedule create nightly-report --queue reports --cron "0 3 * * *"
      postkit schedule create heartbeat --queue pings --every 5m --payload '{"source": "cron"}'
      postkit schedule list
      postkit schedule pause nightly-report
      postkit schedule delete heartbeat --yes
    """


def _when(row: Schedule) -> str:
    if row.cron is not None:
        return f'cron "{row.cron}" {row.timezone}'
    return f"every {format_duration(row.every)}"


@schedule.command("create")
@click.argument("name")
@click.option("--queue", "-q", required=True, metavar="QUEUE", help="Push the jobs here.")
@click.option("--cron", metavar='"EXPR"', help='A 5-field cron expression, e.g. "*/15 * * * *".')
@click.option(
    "--timezone",
    metavar="TZ",
    help="The cron expression's time zone, e.g. Europe/Paris. Default: UTC.",
)
@click.option("--every", type=DURATION, help="Or a fixed interval: 30s, 5m, 2h, 1d.")
@click.option(
    "--payload", default="{}", show_default=True, metavar="JSON", help="Each job's payload."
)
@click.option(
    "--priority",
    type=bounded(limits.PRIORITY),
    default=0,
    show_default=True,
    help="Each job's priority: higher runs first among the queue's ready jobs.",
)
@click.option(
    "--max-attempts",
    type=bounded(limits.MAX_ATTEMPTS),
    help="Each job's attempts. Default: the queue's setting.",
)
@click.option(
    "--create",
    is_flag=True,
    help="Accept a --queue the namespace has not seen yet (a typo guard otherwise).",
)
@operation
def schedule_create(
    name: str,
    queue: str,
    cron: str | None,
    timezone: str | None,
    every: timedelta | None,
    payload: str,
    priority: int,
    max_attempts: int | None,
    create: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Create the schedule NAME, or replace the one of that name.

    Give exactly one of --cron (with --timezone, so "0 9 * * *" stays at 9 am across
    daylight-saving changes) and --every. A --queue the namespace has not seen yet needs
    --create (a typo guard).

    \b
    Example:
      postkit schedule create nightly-report --queue reports --cron "0 3 * * *" \\
          --timezone Europe/Paris
      postkit schedule create heartbeat --queue pings --every 5m --payload '{"ping": true}' \\
          --create
    """
    if (cron is None) == (every is None):
        raise click.UsageError("give exactly one of --cron and --every")
    if timezone is not None and cron is None:
        raise click.UsageError("--timezone applies to --cron schedules only")
    try:
        value = json.loads(payload)
    except (RecursionError, ValueError) as exc:  # ValueError: JSONDecodeError, long integers
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="'--payload'") from None
    # Every check that needs no database first: a bad cron expression is reported as such.
    check_schedule(
        namespace,
        name,
        queue,
        value,
        cron=cron,
        timezone=timezone or "UTC",
        every=every,
        priority=priority,
        max_attempts=max_attempts,
    )
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, option="--queue", create=create)
        existed = any(row.name == name for row in client.schedules())
        saved = client.create_schedule(
            name,
            queue,
            value,
            cron=cron,
            timezone=timezone or "UTC",
            every=every,
            priority=priority,
            max_attempts=max_attempts,
        )
        connection.commit()
    if as_json:
        echo_json(saved)
        return
    click.echo(
        f"{'Replaced' if existed else 'Created'} schedule {saved.name}: pushes "
        f"{payload_text(saved.payload, saved.payload_error)} to {saved.queue}, "
        f"{_when(saved)}; next run {format_time(saved.next_run_at)} UTC."
    )


@schedule.command("list")
@operation
def schedule_list(namespace: str, dsn: str | None, as_json: bool) -> None:
    """Every schedule of the namespace, by name.

    \b
    Example:
      postkit schedule list --namespace my-app
    """
    with connect(dsn, namespace) as (_, client):
        rows = client.schedules()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No schedules in namespace {namespace!r}.")
        return
    headers = ["NAME", "QUEUE", "WHEN", "STATE", "NEXT RUN (UTC)", "LAST RUN (UTC)", "LAST JOB"]
    headers.append("PAYLOAD")
    table = [
        [
            row.name,
            row.queue,
            _when(row),
            _schedule_state(row),
            format_time(row.next_run_at),
            format_time(row.last_run_at),
            row.last_job_id,
            shorten(payload_text(row.payload, row.payload_error), 30),
        ]
        for row in rows
    ]
    click.echo(render_table(headers, table, right=["LAST JOB"]))
    for row in rows:
        if row.broken_at is not None:
            reason = printable(first_line(row.broken_reason))
            click.echo(
                f"\nSchedule {row.name} is broken since {format_time(row.broken_at)} UTC and does "
                f"not fire: {reason}. Create it again to repair it "
                f"(postkit schedule create {row.name} ...{namespace_argument(namespace)})."
            )


def _schedule_state(row: Schedule) -> str:
    if row.broken_at is not None:
        return "broken"
    return "paused" if row.paused else "active"


def _no_such_schedule(name: str, namespace: str) -> click.ClickException:
    return click.ClickException(
        f"no schedule named {name!r} in namespace {namespace!r} "
        f"(see `postkit schedule list{namespace_argument(namespace)}`)"
    )


def _schedule_paused(client: QueueClient, name: str) -> bool:
    """Whether the schedule NAME is paused; refuses, in one line, a name the namespace lacks."""
    row = next((row for row in client.schedules() if row.name == name), None)
    if row is None:
        raise _no_such_schedule(name, client.namespace)
    return row.paused


@schedule.command("pause")
@click.argument("name")
@operation
def schedule_pause(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop firing the schedule NAME. Pausing a schedule that is already paused changes
    nothing (and says so).

    \b
    Example:
      postkit schedule pause nightly-report
    """
    with connect(dsn, namespace) as (connection, client):
        changed = not _schedule_paused(client, name)
        if changed and not client.pause_schedule(name):
            raise _no_such_schedule(name, namespace)
        connection.commit()
    if as_json:
        echo_json({"name": name, "paused": True, "changed": changed})
    elif changed:
        click.echo(
            f"Paused schedule {name}: it does not fire until "
            f"`postkit schedule resume {name}{namespace_argument(namespace)}`."
        )
    else:
        click.echo(f"Schedule {name} is already paused; nothing changed.")


@schedule.command("resume")
@click.argument("name")
@operation
def schedule_resume(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Fire the schedule NAME again; once at the next tick if a run fell due while paused.
    Resuming a schedule that is not paused changes nothing (and says so; the exit code is 0
    either way).

    \b
    Example:
      postkit schedule resume nightly-report
    """
    with connect(dsn, namespace) as (connection, client):
        changed = _schedule_paused(client, name)
        if changed and not client.resume_schedule(name):
            raise _no_such_schedule(name, namespace)
        connection.commit()
    if as_json:
        echo_json({"name": name, "paused": False, "changed": changed})
    elif changed:
        click.echo(f"Resumed schedule {name}: it fires again.")
    else:
        click.echo(f"Schedule {name} is not paused; nothing changed (it already fires).")


@schedule.command("delete")
@click.argument("name")
@yes_option
@operation
def schedule_delete(name: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Delete the schedule NAME. The jobs it already pushed stay. Asks first, unless --yes.

    \b
    Example:
      postkit schedule delete nightly-report --yes
    """
    with connect(dsn, namespace) as (connection, client):
        if not any(row.name == name for row in client.schedules()):
            raise _no_such_schedule(name, namespace)
        connection.rollback()
        confirm(f"Delete schedule {name}?", yes)
        if not client.delete_schedule(name):
            raise _no_such_schedule(name, namespace)
        connection.commit()
    if as_json:
        echo_json({"name": name, "deleted": True})
    else:
        click.echo(f"Deleted schedule {name}.")
