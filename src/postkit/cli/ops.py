"""``postkit jobs``, ``job``, ``push`` and ``cancel``: a queue's jobs a page at a time, one job
and what became of it (its result), and pushing or cancelling one job."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Any

import click
import psycopg

from postkit.cli.console import (
    confirm,
    connect,
    last_error,
    namespace_argument,
    payload_text,
    require_known_queue,
)
from postkit.cli.options import bounded, create_option, operation, yes_option
from postkit.cli.output import (
    JOB_ID,
    SECONDS,
    compact_json,
    echo_json,
    first_line,
    format_duration,
    format_time,
    plural,
    render_fields,
    render_table,
    shorten,
)
from postkit.errors import InvalidStateError, PermissionDeniedError
from postkit.queue import Job, JobCursor, JobResult, QueueClient, limits
from postkit.queue.protocol.operations import JOB_STATES as _JOB_STATES
from postkit.queue.records import to_jsonable

_JOB_TIME_COLUMN = {
    "pending": "READY SINCE (UTC)",
    "scheduled": "RUNS AT (UTC)",
    "running": "CLAIM ENDS (UTC)",
    "dead": "DEAD-LETTERED (UTC)",
    "waiting": "PUSHED (UTC)",
    "cancelled": "CANCELLED (UTC)",
}


@click.command()
@click.argument("queue")
@click.option(
    "--state",
    type=click.Choice(_JOB_STATES),
    default="pending",
    show_default=True,
    help="pending: ready now; scheduled: waiting for their run time; running: claimed; "
    "dead: in the dead-letter queue.",
)
@click.option(
    "--limit",
    metavar="N",
    type=bounded(limits.LIMITS["jobs"]),
    default=50,
    show_default=True,
    help="Page size.",
)
@click.option(
    "--after",
    "after",
    metavar="CURSOR",
    help="Start after this cursor: the one the previous page printed.",
)
@operation
def jobs(
    queue: str,
    state: str,
    limit: int,
    after: str | None,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """The jobs of QUEUE in one state, a page at a time, each with its age: pending and
    scheduled jobs in the order workers take them (highest priority first, then by run time),
    running jobs soonest claim deadline first, dead ones by id.

    A full page ends with the command for the next one (its --after cursor); --json gives the
    cursor as next_after (null on the last page). Each page reads only its own jobs, however
    deep and however long the queue. One job, finished or not, and its result: `postkit job ID`.

    \b
    Example:
      postkit jobs send_otp
      postkit jobs send_otp --state running --limit 20
      postkit jobs send_otp --state scheduled --after scheduled:4211:0:1767225600000000
    """
    try:
        cursor = None if after is None else JobCursor.parse(after)
    except InvalidStateError as exc:
        raise click.BadParameter(str(exc), param_hint="--after") from exc
    if cursor is not None and cursor.state != state:
        raise click.BadParameter(
            f"the cursor continues a {cursor.state} listing: add --state {cursor.state}",
            param_hint="--after",
        )
    with connect(dsn, namespace) as (_, client):
        require_known_queue(client, queue)
        rows = client.jobs(queue, state, limit=limit, after=cursor)
    next_after = JobCursor.after(rows[-1], state).token if len(rows) == limit else None
    if as_json:
        echo_json({"jobs": rows, "next_after": next_after})
        return
    if not rows:
        where = "" if after is None else " after that cursor"
        click.echo(f"No {state} jobs in queue {queue!r}{where}.")
        return

    def moment(job: Job) -> str:
        if state == "running":
            return format_time(job.visible_until)
        if state in ("dead", "cancelled"):
            return format_time(job.failed_at)
        if state == "waiting":
            return format_time(job.created_at)
        return format_time(job.run_at)

    headers = ["ID", "ATTEMPTS", "PRIORITY", "AGE", _JOB_TIME_COLUMN[state], "WORKER"]
    headers += ["PAYLOAD", "LAST ERROR"]
    table = [
        [
            job.id,
            f"{job.attempts}/{job.max_attempts}",
            job.priority,
            format_duration(job.age),
            moment(job),
            job.worker_id,
            shorten(payload_text(job.payload, job.payload_error), 40),
            shorten(last_error(job.errors), 60) or None,
        ]
        for job in rows
    ]
    click.echo(render_table(headers, table, right=["ID", "ATTEMPTS", "PRIORITY", "AGE"]))
    if next_after is not None:
        state_option = "" if state == "pending" else f" --state {state}"
        limit_option = "" if limit == 50 else f" --limit {limit}"
        click.echo(
            f"\nNext page: postkit jobs {queue}{state_option}{limit_option}"
            f" --after {next_after}{namespace_argument(namespace)}"
        )


@click.command()
@click.argument("job_id", type=JOB_ID)
@operation
def job(job_id: int, namespace: str, dsn: str | None, as_json: bool) -> None:
    """One job and what became of it: a live job (pending, scheduled, running, or waiting for
    its parents) with its payload, attempts, parents and the jobs waiting for it; a completed
    one with its result (what its handler returned), kept while its queue keeps results
    (`postkit queue configure QUEUE --retain-results 1d`); a dead letter with its error; a
    cancelled job with the reason.

    --json prints what `QueueClient.result` returns (state, value, error, ...) and, for a live
    or dead job, the job itself under "job" and the ids of the jobs waiting for it under
    "waiting_children". A job nothing is known of (never pushed, in
    another namespace, or completed in a queue that keeps no results) is an error.

    \b
    Example:
      postkit job 42
      postkit job 42 --json
    """
    with connect(dsn, namespace) as (_, client):
        result = client.result(job_id)
        found = None if result.state in ("completed", "unknown") else client.get_job(job_id)
        children = [] if found is None else client.waiting_children(job_id, limit=_CHILDREN)
    if result.state == "unknown":
        raise click.ClickException(
            f"no job {job_id} in namespace {namespace!r}: never pushed, in another namespace, "
            "or completed in a queue that keeps no results (keep them: postkit queue "
            "configure QUEUE --retain-results 1d)"
        )
    expired = found is not None and found.claim_expired
    if as_json:
        echo_json(
            {
                **to_jsonable(result),
                "job": found,
                "claim_expired": expired,
                "waiting_children": children,
            }
        )
        return
    click.echo(f"Job {job_id} of queue {result.queue}: {_job_state(result, found, expired)}")
    fields = _job_fields(result, found, namespace, expired)
    if children:
        more = ", ..." if len(children) == _CHILDREN else ""
        fields.append(("waiting for it", ", ".join(map(str, children)) + more))
    click.echo(render_fields(fields))


_CHILDREN = 20
"""How many of the jobs waiting for it `postkit job` lists."""


def _job_state(result: JobResult, found: Job | None, expired: bool) -> str:
    """The headline of `postkit job`: the state, and the attempts."""
    if found is not None and expired:
        return (
            f"claim expired (attempt {found.attempts} of {found.max_attempts}): no worker "
            "holds it, and the next tick_timeouts returns it to pending"
        )
    if found is not None and result.state == "running":
        return f"running (attempt {found.attempts} of {found.max_attempts})"
    if found is not None and result.state not in ("dead", "cancelled"):
        return f"{result.state} ({found.attempts} of {plural(found.max_attempts, 'attempt')} made)"
    attempts = "" if result.attempts is None else f" after {plural(result.attempts, 'attempt')}"
    if result.state in ("dead", "cancelled"):
        return f"{result.state} ({result.reason}){attempts}"
    return f"{result.state}{attempts}"


def _job_fields(
    result: JobResult, found: Job | None, namespace: str, expired: bool
) -> list[tuple[str, object]]:
    """The lines of `postkit job` under its headline."""
    if result.state == "completed":
        return [
            ("result", payload_text(result.value, result.value_error)),
            ("completed", f"{format_time(result.finished_at)} UTC"),
            ("kept until", f"{format_time(result.expires_at)} UTC (the queue's retention)"),
        ]
    fields: list[tuple[str, object]] = []
    if result.state == "dead":
        fields.append(("error", first_line(result.error) or None))
        fields.append(("dead-lettered", f"{format_time(result.finished_at)} UTC"))
    if found is not None:
        fields.append(("payload", payload_text(found.payload, found.payload_error)))
        fields.append(("priority", found.priority))
        fields.append(("pushed", f"{format_time(found.created_at)} UTC"))
    if found is not None and result.state in ("pending", "scheduled"):
        when = "runs at" if result.state == "scheduled" else "ready since"
        fields.append((when, f"{format_time(found.run_at)} UTC"))
    if found is not None and result.state == "running":
        fields.append(("worker", found.worker_id))
        if expired:
            fields.append(("claim ended", f"{format_time(found.visible_until)} UTC"))
            fields.append(
                (
                    "returned by",
                    "any worker of the namespace (its tick_timeouts), or: "
                    f"postkit tick{namespace_argument(namespace)}",
                )
            )
        else:
            fields.append(("claim ends", f"{format_time(found.visible_until)} UTC"))
    if found is not None and found.progress is not None:
        note = f": {found.progress_note}" if found.progress_note else ""
        said = f" (at {format_time(found.progress_at)} UTC)" if found.progress_at else ""
        fields.append(("progress", f"{found.progress:.0%}{note}{said}"))
    if found is not None and found.depends_on:
        fields.append(("parents", ", ".join(str(parent) for parent in found.depends_on)))
    if found is not None and found.waiting_on is not None:
        fields.append(("waiting on", f"{plural(found.waiting_on, 'parent')} to complete"))
    if result.state == "cancelled":
        fields.append(("cancelled", f"{format_time(result.finished_at)} UTC"))
    if found is not None and result.state != "dead" and found.errors:
        fields.append(("last error", last_error(found.errors)))
    if result.state == "dead":
        if result.redriven_job_id is not None:
            fields.append(("redriven", f"as job {result.redriven_job_id}"))
        fields.append(
            ("all errors", f"postkit dlq show {result.job_id}{namespace_argument(namespace)}")
        )
    return fields


def _payload_argument(text: str) -> Any:
    """The JSON argument of `postkit push`: a JSON value, or ``-`` to read it from stdin."""
    if text == "-":
        text = sys.stdin.read()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f'not valid JSON ({exc}); quote it for the shell, e.g. \'{{"user_id": "42"}}\'',
            param_hint="JSON",
        ) from None


@click.command()
@click.argument("queue")
@click.argument("payload", metavar="JSON")
@click.option(
    "--delay",
    type=SECONDS,
    help="Run no earlier than this long from now: 90, 30s, 5m, 2h.",
)
@click.option(
    "--priority",
    type=bounded(limits.PRIORITY),
    default=0,
    show_default=True,
    help="Higher runs first among the queue's ready jobs.",
)
@click.option(
    "--unique-key",
    metavar="KEY",
    help="While a job with this key is pending or running in QUEUE, pushing another does nothing.",
)
@click.option(
    "--max-attempts",
    type=bounded(limits.MAX_ATTEMPTS),
    help="Claims before the job is dead-lettered. Default: the queue's setting.",
)
@click.option(
    "--wait-for-room",
    type=SECONDS,
    help="A queue at its --max-pending: wait this long for workers to make room (up to 1h), "
    "instead of failing at once.",
)
@create_option
@operation
def push(
    queue: str,
    payload: str,
    delay: float | None,
    priority: int,
    unique_key: str | None,
    max_attempts: int | None,
    wait_for_room: float | None,
    create: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Push a job to QUEUE with the payload JSON (any JSON value; - reads it from stdin), as
    QueueClient.push does from an application. Prints the new job's id.

    \b
    Example:
      postkit push send_otp '{"user_id": "42"}'
      postkit push reports '{"kind": "weekly"}' --delay 1h --priority 5
      postkit push send_otp '{"user_id": "42"}' --unique-key otp-42   at most one at a time
      echo '{"user_id": "42"}' | postkit push send_otp -
      postkit push new_queue '{}' --create                            a queue not seen yet
      postkit push imports '{}' --wait-for-room 30s                   a queue that may be full
    """
    value = _payload_argument(payload)
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, create=create)
        job_id = client.push(
            queue,
            value,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            unique_key=unique_key,
            wait_for_room=wait_for_room,
        )
        job = None if job_id is None else client.get_job(job_id)
        connection.commit()
        paused = _paused(connection, client, queue)
    if as_json:
        echo_json(
            {
                "id": job_id,
                "queue": queue,
                "run_at": None if job is None else job.run_at,
                "deduplicated": job_id is None,
                "paused": paused,
            }
        )
    elif job_id is None:
        click.echo(
            f"Not pushed: a job with unique key {unique_key!r} is already pending or running in "
            f"queue {queue}."
        )
    else:
        when = (
            "is ready now"
            if delay is None or job is None
            else f"is due at {format_time(job.run_at)} UTC"
        )
        if paused:
            when += (
                f", but queue {queue} is paused: no worker takes it until "
                f"postkit queue resume {queue}{namespace_argument(namespace)}"
            )
        click.echo(f"Pushed job {job_id} to queue {queue}; it {when}.")


def _paused(connection: psycopg.Connection[Any], client: QueueClient, queue: str) -> bool | None:
    """Whether ``queue`` is paused, or None when the role may not read it (stats is an
    operator's call; a producer's role may push without it)."""
    try:
        rows = client.stats(queue)
    except (PermissionDeniedError, psycopg.errors.InsufficientPrivilege):
        connection.rollback()
        return None
    connection.rollback()  # read-only: hold no snapshot
    return any(row.paused for row in rows)


@click.command()
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--tree",
    is_flag=True,
    help="Cancel every live job of JOB_ID's tree: the job and what descends from it through "
    "depends_on, also past its descendants that completed (JOB_ID itself may have completed).",
)
@yes_option
@operation
def cancel(
    job_id: int, tree: bool, yes: bool, namespace: str, dsn: str | None, as_json: bool
) -> None:
    """Cancel the job JOB_ID, with the jobs that wait for it (their parent is cancelled): a
    pending, scheduled or waiting one never runs; a running one is cancelled at once (its
    worker's claim is stale from now on, so whatever its handler does is not settled, and it
    is never retried; its worker is notified and gives its slot back). `postkit job
    JOB_ID` shows it as cancelled for its queue's retention.

    With --tree, cancel the live part of JOB_ID's tree instead: the jobs its completion
    released run as any job, and --tree reaches them, and theirs, however deep.

    A dead letter is no longer a live job (redrive it with `postkit dlq redrive`, or leave it to
    retention). Shows the job and asks first, unless --yes.

    \b
    Example:
      postkit cancel 42
      postkit cancel 42 --yes --json
      postkit cancel 42 --tree
    """
    if tree:
        _cancel_tree(job_id, yes, namespace, dsn, as_json)
        return
    with connect(dsn, namespace) as (connection, client):
        job = client.get_job(job_id)
        connection.rollback()
        if job is None:
            raise click.ClickException(
                f"no job {job_id} in namespace {namespace!r}: never pushed, in another "
                "namespace, or completed (acknowledged jobs leave the queue)"
            )
        if job.state == "dead":
            raise click.ClickException(
                f"job {job_id} is a dead letter of queue {job.queue!r}, not a live job: nothing "
                f"to cancel (see `postkit dlq show {job_id}{namespace_argument(namespace)}`)"
            )
        if job.state == "cancelled":
            raise click.ClickException(
                f"job {job_id} of queue {job.queue!r} is cancelled already (see `postkit job "
                f"{job_id}{namespace_argument(namespace)}`)"
            )
        waits = job.run_at is not None and job.run_at > datetime.now(timezone.utc)
        when = f"{'runs at' if waits else 'ready since'} {format_time(job.run_at)} UTC"
        if job.state == "waiting":
            when = f"waiting for {plural(job.waiting_on or 0, 'parent')}"
        if job.state == "running":
            when = (
                f"running on {job.worker_id or 'a worker'}, whose claim ends now: its handler's "
                "outcome is dropped"
            )
        confirm(
            f"Cancel job {job_id} of queue {job.queue} (payload "
            f"{shorten(compact_json(job.payload), 40)}, {when})? It never runs, and the jobs "
            "waiting for it are cancelled too.",
            yes,
        )
        if not client.cancel(job_id):
            raise click.ClickException(
                f"job {job_id} is gone: it was completed or cancelled meanwhile"
            )
        connection.commit()
    if as_json:
        echo_json({"id": job_id, "queue": job.queue, "cancelled": True})
    else:
        click.echo(f"Cancelled job {job_id} of queue {job.queue}.")


_LIVE = ("pending", "scheduled", "running", "waiting")


def _cancel_tree(job_id: int, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """`postkit cancel JOB_ID --tree`: count the tree's live jobs, ask, then cancel them a page
    at a time, each page committed."""
    with connect(dsn, namespace) as (connection, client):
        jobs = client.job_tree(job_id, limit=limits.LIMITS["job_tree"].high)
        connection.rollback()
        if not jobs:
            raise click.ClickException(
                f"no job {job_id} in namespace {namespace!r}, and no live job descends from it: "
                "never pushed, in another namespace, or its tree has finished"
            )
        live = [job for job in jobs if job.state in _LIVE]
        cancelled = 0
        if live:
            running = sum(job.state == "running" for job in live)
            confirm(
                f"Cancel {plural(len(live), 'live job')} of job {job_id}'s tree "
                f"({running} running)?",
                yes,
            )
            while done := client.cancel_tree(job_id):
                connection.commit()
                cancelled += done
    if as_json:
        echo_json({"id": job_id, "tree": True, "cancelled": cancelled})
    elif cancelled:
        click.echo(f"Cancelled {plural(cancelled, 'job')} of job {job_id}'s tree.")
    else:
        click.echo(f"Nothing to cancel: no job of job {job_id}'s tree is live.")
