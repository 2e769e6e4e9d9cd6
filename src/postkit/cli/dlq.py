"""``postkit dlq``: list, show, redrive and purge dead letters, the jobs the queue gave up on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
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
    resolve_moments,
)
from postkit.cli.options import bounded, operation, yes_option
from postkit.cli.output import (
    DURATION,
    JOB_ID,
    TIME,
    Ago,
    capped,
    echo_json,
    first_line,
    format_duration,
    format_time,
    plural,
    printable,
    render_fields,
    render_table,
    shorten,
)
from postkit.queue import DeadLetter, Job, QueueClient, limits
from postkit.queue.records import Redriven

_SHOWN_BEFORE_CONFIRMING = 20
"""Dead letters listed before a redrive's confirmation; the rest are counted."""


@click.group()
def dlq() -> None:
    """Investigate and redrive dead letters, the jobs the queue gave up on: a redrive pushes
    them again as new jobs.

    A job is dead-lettered when a handler fails it for good, when its attempts run out, or
    when its last claim expires. It is kept with its payload and every attempt's error until
    its queue's retention (30 days by default) prunes it.

    \b
    Example:
      postkit dlq list --since 1h
      postkit dlq show 42
      postkit dlq redrive 42 --dry-run
      postkit dlq redrive --queue send_otp --error "Meta is down" --yes
      postkit dlq purge --older-than 30d
    """


@dlq.command("list")
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue.")
@click.option("--since", type=TIME, help="Failed at or after: a duration ago (2h) or a time.")
@click.option("--until", type=TIME, help="Failed before: a duration ago (30m) or a time.")
@click.option("--error", "error_contains", metavar="TEXT", help="The last error contains TEXT.")
@click.option("--include-redriven", is_flag=True, help="Also the dead letters already redriven.")
@click.option(
    "--limit",
    metavar="N",
    type=bounded(limits.LIMITS["dead_letters"]),
    default=50,
    show_default=True,
    help="At most.",
)
@operation
def dlq_list(
    queue: str | None,
    since: datetime | Ago | None,
    until: datetime | Ago | None,
    error_contains: str | None,
    include_redriven: bool,
    limit: int,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """The dead letters, newest first, with their last error.

    --since and --until take a duration ago by the database's clock (30s, 5m, 2h, 7d) or an
    ISO time (2025-01-31T09:00, UTC unless it names an offset). --error matches a substring of
    the last error, ignoring case.

    \b
    Example:
      postkit dlq list
      postkit dlq list --queue send_otp --since 2h --error "503"
      postkit dlq list --since 2025-01-31T09:00 --until 2025-01-31T10:00 --json
    """
    with connect(dsn, namespace) as (_, client):
        require_known_queue(client, queue, option="--queue")
        failed_after, failed_before = resolve_moments(client, since, until)
        rows = client.dead_letters(
            queue,
            limit=limit,
            failed_after=failed_after,
            failed_before=failed_before,
            error_contains=error_contains,
            include_redriven=include_redriven,
        )
    if as_json:
        echo_json(rows)
        return
    if not rows:
        filtered = any(value is not None for value in (queue, since, until, error_contains))
        click.echo(f"No dead letters in namespace {namespace!r}{' match' if filtered else ''}.")
        return
    headers = ["JOB", "QUEUE", "DEAD-LETTERED (UTC)", "REASON", "ATTEMPTS", "PAYLOAD", "LAST ERROR"]
    if include_redriven:
        headers.append("REDRIVEN AS")
    table = [
        [
            dead.job_id,
            dead.queue,
            format_time(dead.failed_at),
            dead.reason,
            f"{dead.attempts}/{dead.max_attempts}",
            shorten(payload_text(dead.payload, dead.payload_error), 30),
            shorten(first_line(dead.error), 60),
            *([dead.redriven_job_id] if include_redriven else []),
        ]
        for dead in rows
    ]
    click.echo(render_table(headers, table, right=["JOB", "ATTEMPTS", "REDRIVEN AS"]))
    if len(rows) == limit:
        click.echo(
            f"\nThe newest {limit} shown; more may match: raise --limit, or narrow with "
            "--since/--until."
        )


def _find_dead_letter(client: QueueClient, job: Job) -> DeadLetter | None:
    """The dead letter of a dead ``job``: dead_letters() of its queue, in the window of its
    failed_at (to the microsecond), redriven or not."""
    if job.failed_at is None:
        return None
    window = client.dead_letters(
        job.queue,
        limit=10_000,
        failed_after=job.failed_at,
        failed_before=job.failed_at + timedelta(microseconds=1),
        include_redriven=True,
    )
    return next((dead for dead in window if dead.job_id == job.id), None)


@dlq.command("show")
@click.argument("job_id", type=JOB_ID)
@click.option("--full", is_flag=True, help="Every error in full, with its traceback.")
@operation
def dlq_show(job_id: int, full: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """One dead letter: its payload and every attempt's error, one attempt per line.

    \b
    Example:
      postkit dlq show 42
      postkit dlq show 42 --full      each error with its traceback
    """
    with connect(dsn, namespace) as (_, client):
        job = client.get_job(job_id)
        if job is None:
            raise click.ClickException(
                f"no job {job_id} in namespace {namespace!r}: never pushed, in another "
                "namespace, or completed (acknowledged jobs leave the queue)"
            )
        if job.state != "dead":
            raise click.ClickException(
                f"job {job_id} is not a dead letter: it is {job.state} in queue {job.queue!r} "
                f"(see `postkit jobs {job.queue} --state {job.state}"
                f"{namespace_argument(namespace)}`)"
            )
        dead = _find_dead_letter(client, job)
    if as_json:
        echo_json(dead if dead is not None else job)
        return
    reason = dead.reason if dead is not None else "dead"
    click.echo(
        f"Job {job.id} of queue {job.queue}: {reason} after {job.attempts} of "
        f"{plural(job.max_attempts, 'attempt')}"
    )
    fields: list[tuple[str, object]] = [
        ("payload", payload_text(job.payload, job.payload_error)),
        ("priority", job.priority),
        ("pushed", f"{format_time(job.created_at)} UTC"),
        ("failed", f"{format_time(job.failed_at)} UTC"),
        ("last worker", job.worker_id),
    ]
    if job.unique_key is not None:
        fields.append(("unique key", job.unique_key))
    if dead is not None:
        fields.append(("pruned at", f"{format_time(dead.expires_at)} UTC (the queue's retention)"))
        if dead.redriven_job_id is not None:
            fields.append(
                (
                    "redriven",
                    f"as job {dead.redriven_job_id} at {format_time(dead.redriven_at)} UTC",
                )
            )
        else:
            fields.append(
                (
                    "redriven",
                    f"no (redrive it: postkit dlq redrive {job.id}{namespace_argument(namespace)})",
                )
            )
    click.echo(render_fields(fields))
    click.echo("\nErrors, oldest first:")
    if not job.errors:
        click.echo("  (none recorded)")
        return
    headers = ["ATTEMPT", "KIND", "AT (UTC)", "WORKER", "ERROR"]
    rows = [
        [
            f"#{entry.get('attempt', '?')}",
            entry.get("kind"),
            format_time(entry.get("at")),
            entry.get("worker_id"),
            first_line(str(entry.get("error") or "")),
        ]
        for entry in job.errors
    ]
    header, *lines = render_table(headers, rows).splitlines()
    click.echo(_indent(header))
    for line, entry in zip(lines, job.errors, strict=True):
        click.echo(_indent(line))
        if full:
            rest = str(entry.get("error") or "").strip("\n").splitlines()[1:]
            for extra in rest:
                click.echo(f"      {printable(extra)}".rstrip())


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


@dlq.command("redrive")
@click.argument("job_ids", nargs=-1, type=JOB_ID, metavar="[JOB_ID]...")
@click.option("--queue", "-q", metavar="QUEUE", help="The dead letters of this queue.")
@click.option("--error", "error_contains", metavar="TEXT", help="Whose last error contains TEXT.")
@click.option("--since", type=TIME, help="Failed at or after: a duration ago (2h) or a time.")
@click.option("--until", type=TIME, help="Failed before: a duration ago (30m) or a time.")
@click.option("--all", "every", is_flag=True, help="Every dead letter of the namespace.")
@click.option("--to-queue", metavar="QUEUE", help="Push the new jobs here instead.")
@click.option(
    "--create",
    is_flag=True,
    help="Accept a --to-queue the namespace has not seen yet (a typo guard otherwise).",
)
@click.option(
    "--limit",
    metavar="N",
    type=bounded(limits.LIMITS["redrive"]),
    default=1000,
    show_default=True,
    help="Redrive at most this many.",
)
@click.option("--dry-run", is_flag=True, help="Only show what would be redriven.")
@yes_option
@operation
def dlq_redrive(
    job_ids: tuple[int, ...],
    queue: str | None,
    error_contains: str | None,
    since: datetime | Ago | None,
    until: datetime | Ago | None,
    every: bool,
    to_queue: str | None,
    create: bool,
    limit: int,
    dry_run: bool,
    yes: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Redrive dead letters: push them again as new jobs with fresh attempts, the JOB_IDs
    given or every one matching the filters (--all: every one).

    Each dead letter is redriven at most once, even by two operators at once; it stays in the
    dead-letter queue, linked to its new job. Shows what it will redrive and asks first, unless
    --yes. Exits 1 when a JOB_ID given is not a dead letter (or was already redriven).

    \b
    Example:
      postkit dlq redrive 42 --dry-run
      postkit dlq redrive 42 43 --yes
      postkit dlq redrive --queue send_otp --error "Meta is down" --since 2h
      postkit dlq redrive --queue send_otp --to-queue send_otp_slow --create --all --yes
    """
    filters = (queue, error_contains, since, until)
    if not job_ids and not every and all(value is None for value in filters):
        raise click.UsageError(
            "say which dead letters to redrive: JOB_IDs, or --queue, --error, --since, --until, "
            "or --all for every one"
        )
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, option="--queue")
        require_known_queue(client, to_queue, option="--to-queue", create=create)
        failed_after, failed_before = resolve_moments(client, since, until)
        planned = client.redrive(
            list(job_ids) or None,
            queue=queue,
            failed_after=failed_after,
            failed_before=failed_before,
            error_contains=error_contains,
            to_queue=to_queue,
            limit=limit,
            dry_run=True,
        )
        connection.rollback()  # the dry run locked what it looked at; nothing changed
        found = {row.job_id for row in planned}
        missing = [job_id for job_id in dict.fromkeys(job_ids) if job_id not in found]
        matching = "" if all(value is None for value in filters) else " matching the filters"
        why_missing = [
            _why_not_redriven(connection, client, job_id, matching) for job_id in missing
        ]
        details = {
            row.job_id: client.get_job(row.job_id) for row in planned[:_SHOWN_BEFORE_CONFIRMING]
        }
        connection.rollback()
        if dry_run or not planned:
            redriven: list[Redriven] = []
        else:
            if not yes:
                _show_planned(planned, details, to_queue, to_stderr=as_json)
            what = "as a new job" if len(planned) == 1 else "as new jobs"
            confirm(f"Redrive {plural(len(planned), 'dead letter')} {what}?", yes)
            redriven = client.redrive(
                [row.job_id for row in planned], to_queue=to_queue, limit=len(planned)
            )
            connection.commit()
    if as_json:
        echo_json(
            {
                "dry_run": dry_run,
                "redriven": planned if dry_run else redriven,
                "missing": missing,
            }
        )
    elif dry_run:
        if planned:
            _show_planned(planned, details, to_queue, to_stderr=False, dry_run=True)
            click.echo("Dry run: nothing changed.")
        elif not missing:
            click.echo("No dead letters match; nothing would be redriven.")
    elif not planned:
        if not missing:
            click.echo("No dead letters match; nothing redriven.")
    else:
        what = "as a new job" if len(redriven) == 1 else "as new jobs"
        click.echo(f"Redrove {plural(len(redriven), 'dead letter')} {what}:")
        table = [[row.job_id, row.queue, row.new_job_id] for row in redriven]
        headers = ["JOB", "QUEUE", "NEW JOB"]
        click.echo(_indent(render_table(headers, table, right=["JOB", "NEW JOB"])))
        if len(redriven) < len(planned):
            click.echo(
                f"{len(planned) - len(redriven)} of them had been redriven by someone else "
                "meanwhile."
            )
    if missing:
        raise click.ClickException("; ".join(why_missing))


def _why_not_redriven(
    connection: psycopg.Connection[Any], client: QueueClient, job_id: int, matching: str
) -> str:
    """Why a JOB_ID given to `dlq redrive` is not to be redriven: it was already (as which job),
    or it is no dead letter (matching the filters) of the namespace."""
    job = client.get_job(job_id)
    dead = None if job is None or job.state != "dead" else _find_dead_letter(client, job)
    connection.rollback()
    if dead is not None and dead.redriven_job_id is not None:
        return f"job {job_id} was already redriven as job {dead.redriven_job_id}"
    return (
        f"job {job_id} is not in the dead-letter queue of namespace {client.namespace!r}{matching}"
    )


def _show_planned(
    planned: Sequence[Redriven],
    details: Mapping[int, Job | None],
    to_queue: str | None,
    *,
    to_stderr: bool,
    dry_run: bool = False,
) -> None:
    """What a redrive will (or, in a dry run, would) do: one line per dead letter."""
    verb = "Would redrive" if dry_run else "Will redrive"
    target = f" into queue {to_queue}" if to_queue else ""
    click.echo(f"{verb} {plural(len(planned), 'dead letter')}{target}:", err=to_stderr)
    table = []
    for row in planned[:_SHOWN_BEFORE_CONFIRMING]:
        job = details.get(row.job_id)
        table.append(
            [
                row.job_id,
                job.queue if job else None,
                format_time(job.failed_at) if job else None,
                f"{job.attempts}/{job.max_attempts}" if job else None,
                shorten(payload_text(job.payload, job.payload_error), 30) if job else None,
                shorten(last_error(job.errors), 60) if job else None,
            ]
        )
    headers = ["JOB", "QUEUE", "DEAD-LETTERED (UTC)", "ATTEMPTS", "PAYLOAD", "LAST ERROR"]
    click.echo(_indent(render_table(headers, table, right=["JOB", "ATTEMPTS"])), err=to_stderr)
    if len(planned) > _SHOWN_BEFORE_CONFIRMING:
        click.echo(f"  ... and {len(planned) - _SHOWN_BEFORE_CONFIRMING} more", err=to_stderr)


_PURGE_COUNT_CAP = 10_000
"""The confirmation of ``dlq purge`` counts this many at most ("10000+")."""


@dlq.command("purge")
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    help="Delete the dead letters that failed longer ago than this (30s, 5m, 2h, 7d).",
)
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue's.")
@yes_option
@operation
def dlq_purge(
    older_than: timedelta,
    queue: str | None,
    yes: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Delete the dead letters that failed more than --older-than ago, redriven or not.

    Retention does this on its own (each queue keeps dead letters 30 days by default); purge
    is for clearing out sooner. Asks first, unless --yes.

    \b
    Example:
      postkit dlq purge --older-than 7d
      postkit dlq purge --older-than 1h --queue send_otp --yes
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, option="--queue")
        # One cutoff, by the queue's clock, for the count shown and for the delete: neither
        # the client's clock nor the time spent answering the prompt changes what goes.
        cutoff = client.clock() - older_than
        matching = client.count_dead_letters(
            queue, failed_before=cutoff, include_redriven=True, cap=_PURGE_COUNT_CAP
        )
        connection.rollback()
        deleted = 0
        if matching:
            count = capped(matching, _PURGE_COUNT_CAP)
            where = f" of queue {queue}" if queue else ""
            confirm(
                f"Delete {count} dead letter(s){where} that failed more than "
                f"{format_duration(older_than)} ago? This cannot be undone.",
                yes,
            )
            deleted = client.purge_dead_letters(failed_before=cutoff, queue=queue)
            connection.commit()
    if as_json:
        echo_json({"deleted": deleted})
    else:
        click.echo(f"Deleted {plural(deleted, 'dead letter')}.")
