"""``postkit queue``: pause, resume, configure or purge one queue of a namespace."""

from __future__ import annotations

import shlex
from datetime import timedelta
from typing import Any

import click

from postkit.cli.console import confirm, connect, namespace_argument, require_known_queue
from postkit.cli.options import bounded, create_option, operation, yes_option
from postkit.cli.output import (
    DURATION,
    RATE,
    RESET,
    SECONDS,
    OrDefault,
    capped,
    echo_json,
    format_duration,
    plural,
    render_fields,
    render_table,
)
from postkit.queue import QueueClient, QueuePolicy, limits
from postkit.queue.records import to_jsonable

_GROUP_CAP = 100_000
"""The counts `postkit queue groups` shows exactly; more read as 100000+."""


@click.group("queue")
def queue_group() -> None:
    """Pause, resume, configure or purge a queue, or see its group keys.

    A queue name the namespace has not seen (no jobs, dead letters, settings, schedule or
    worker, and no outcomes in the last hour) is refused, with the known queues: a typo
    would otherwise act on a queue of its own. --create accepts a new name where that makes
    sense.

    \b
    Example:
      postkit queue pause send_otp
      postkit queue resume send_otp
      postkit queue configure send_otp --max-attempts 5 --retain-dead 7d
      postkit queue purge send_otp --yes
      postkit queue groups reports          each tenant's pending, scheduled and running jobs
    """


def _is_paused(client: QueueClient, queue: str) -> bool:
    (row,) = client.stats(queue, cap=1)
    return row.paused


@queue_group.command("pause")
@click.argument("queue")
@create_option
@operation
def queue_pause(queue: str, create: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop handing out the jobs of QUEUE. Pushes are still accepted, running jobs finish.
    Pausing a queue that is already paused changes nothing (and says so).

    \b
    Example:
      postkit queue pause send_otp --namespace my-app
      postkit queue pause reports --create     a queue that has no jobs yet
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, create=create)
        changed = not _is_paused(client, queue)
        if changed:
            client.pause_queue(queue)
        connection.commit()
    if as_json:
        echo_json({"queue": queue, "paused": True, "changed": changed})
    elif changed:
        click.echo(
            f"Paused queue {queue}: workers get none of its jobs until "
            f"`postkit queue resume {queue}{namespace_argument(namespace)}`; pushes are still "
            "accepted."
        )
    else:
        click.echo(f"Queue {queue} is already paused; nothing changed.")


@queue_group.command("resume")
@click.argument("queue")
@operation
def queue_resume(queue: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Hand out the jobs of QUEUE again. Resuming a queue that is not paused changes nothing
    (and says so; the exit code is 0 either way).

    \b
    Example:
      postkit queue resume send_otp --namespace my-app
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue)
        changed = _is_paused(client, queue)
        if changed:
            client.resume_queue(queue)
        connection.commit()
    if as_json:
        echo_json({"queue": queue, "paused": False, "changed": changed})
    elif changed:
        click.echo(f"Resumed queue {queue}: workers get its jobs again.")
    else:
        click.echo(f"Queue {queue} is not paused; nothing changed (workers already get its jobs).")


def _describe_policy(policy: QueuePolicy) -> list[tuple[str, object]]:
    kept = policy.retain_completed
    return [
        ("state", "paused" if policy.paused else "active"),
        ("max attempts", policy.max_attempts),
        ("visibility timeout", format_duration(policy.visibility_timeout)),
        (
            "backoff",
            f"{format_duration(policy.backoff_base)} doubling, up to "
            f"{format_duration(policy.backoff_cap)}",
        ),
        ("completed jobs", "deleted at once" if kept is None else f"kept {format_duration(kept)}"),
        ("dead letters", f"kept {format_duration(policy.retain_dead)}"),
        (
            "job results",
            "not kept"
            if policy.retain_results is None
            else f"kept {format_duration(policy.retain_results)}",
        ),
        ("max payload", f"{policy.max_payload_bytes:,} bytes"),
        (
            "max pending",
            "no limit"
            if policy.max_pending is None
            else f"{policy.max_pending:,} (a push past it is refused)",
        ),
        *_describe_limits(policy),
    ]


def _describe_limits(policy: QueuePolicy) -> list[tuple[str, object]]:
    """The flow limits of ``policy``, one field each, as `postkit queue configure` shows
    them."""
    rate = policy.rate
    group = (
        "one at a time, in push order"
        if policy.group_ordered
        else "no limit"
        if policy.group_concurrency is None
        else f"at most {policy.group_concurrency} running"
    )
    return [
        (
            "concurrency",
            "no limit" if policy.concurrency is None else f"at most {policy.concurrency} running",
        ),
        (
            "rate",
            "no limit"
            if rate is None
            else f"at most {rate[0]} claims per {format_duration(rate[1])}",
        ),
        ("per group key", group),
        (
            "claims",
            "shared fairly among group keys, by weight" if policy.fair else "in pull order",
        ),
    ]


@queue_group.command("configure")
@click.argument("queue")
@click.option(
    "--max-attempts",
    metavar="N|default",
    type=OrDefault(bounded(limits.MAX_ATTEMPTS)),
    help="Claims before a job is dead-lettered (1-1000; built-in: 20).",
)
@click.option(
    "--visibility-timeout",
    metavar="SECONDS|default",
    type=OrDefault(SECONDS),
    help="How long a claim lasts without a heartbeat: 30, 30s, 5m (built-in: 30s).",
)
@click.option(
    "--backoff-base",
    metavar="SECONDS|default",
    type=OrDefault(SECONDS),
    help="The first retry waits 1-2 times this, doubling each attempt (built-in: 1s).",
)
@click.option(
    "--backoff-cap",
    metavar="SECONDS|default",
    type=OrDefault(SECONDS),
    help="The longest a retry waits (built-in: 1h).",
)
@click.option(
    "--max-payload-bytes",
    metavar="BYTES|default",
    type=OrDefault(bounded(limits.MAX_PAYLOAD_BYTES)),
    help="The largest payload a push accepts (built-in: 1048576, 1 MiB).",
)
@click.option(
    "--retain-completed",
    metavar="DURATION|default",
    type=OrDefault(DURATION),
    help="Keep completed jobs this long: 1h, 7d (built-in: deleted at once).",
)
@click.option(
    "--retain-dead",
    metavar="DURATION|default",
    type=OrDefault(DURATION),
    help="Keep dead letters this long (built-in: 30d).",
)
@click.option(
    "--retain-results",
    metavar="DURATION|default",
    type=OrDefault(DURATION),
    help="Keep the result of each completed job (what its handler returned) this long, for "
    "`postkit job` and wait_for_result: 1h, 7d (built-in: not kept).",
)
@click.option(
    "--concurrency",
    metavar="N|default",
    type=OrDefault(bounded(limits.QUEUE_CONCURRENCY)),
    help="At most N of the queue's jobs running at once, across every worker (built-in: no limit).",
)
@click.option(
    "--rate",
    metavar="CLAIMS/PERIOD|default",
    type=OrDefault(RATE),
    help="At most CLAIMS claims in any PERIOD, across every worker: 10/1s, 600/1m (built-in: "
    "no limit).",
)
@click.option(
    "--group-concurrency",
    metavar="N|default",
    type=OrDefault(bounded(limits.GROUP_CONCURRENCY)),
    help="At most N running jobs per group key (push's group_key) (built-in: no limit).",
)
@click.option(
    "--group-ordered/--no-group-ordered",
    default=None,
    help="Run the jobs of each group key one at a time, in push order (built-in: off).",
)
@click.option(
    "--max-pending",
    metavar="N|default",
    type=OrDefault(bounded(limits.MAX_PENDING)),
    help="Refuse a push that would make the queue hold more than N pending jobs: "
    "backpressure on a runaway producer (built-in: no limit).",
)
@click.option(
    "--fair/--no-fair",
    default=None,
    help="Share the queue's claims among its group keys by turns, each key given its weight "
    "per turn (`postkit queue weight`), so that one key's backlog keeps no other waiting "
    "(built-in: off, claims in pull order).",
)
@create_option
@operation
def queue_configure(
    queue: str,
    max_attempts: int | str | None,
    visibility_timeout: float | str | None,
    backoff_base: float | str | None,
    backoff_cap: float | str | None,
    max_payload_bytes: int | str | None,
    retain_completed: timedelta | str | None,
    retain_dead: timedelta | str | None,
    retain_results: timedelta | str | None,
    concurrency: int | str | None,
    rate: tuple[int, float] | str | None,
    group_concurrency: int | str | None,
    group_ordered: bool | None,
    max_pending: int | str | None,
    fair: bool | None,
    create: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Change the settings of QUEUE: the defaults its jobs get when a push or pull does not
    say otherwise, how long its finished jobs are kept, and its flow limits, which hold across
    every worker. Settings not given keep their value; a value of `default` restores the
    built-in one (for a limit: none). Prints the settings now in force.

    \b
    Example:
      postkit queue configure send_otp --max-attempts 5 --backoff-base 2s --backoff-cap 10m
      postkit queue configure send_otp --retain-dead 7d --retain-completed 1h
      postkit queue configure reports --retain-results 1d
      postkit queue configure send_otp --concurrency 20 --rate 10/1s
      postkit queue configure sync_user --group-ordered    one job per group key, in order
      postkit queue configure reports --fair       tenants (group keys) take turns
      postkit queue configure imports --max-pending 10000   refuse pushes past 10,000 pending
      postkit queue configure send_otp --rate default          no rate limit any more
      postkit queue configure send_otp --max-attempts default     back to the built-in 20
      postkit queue configure reports --visibility-timeout 5m --create
    """
    given: dict[str, Any] = {
        "max_attempts": max_attempts,
        "visibility_timeout": visibility_timeout,
        "backoff_base": backoff_base,
        "backoff_cap": backoff_cap,
        "max_payload_bytes": max_payload_bytes,
        "retain_completed": retain_completed,
        "retain_dead": retain_dead,
        "retain_results": retain_results,
        "concurrency": concurrency,
        "rate": rate,
        "group_concurrency": group_concurrency,
        "max_pending": max_pending,
    }
    if all(value is None for value in given.values()) and group_ordered is None and fair is None:
        raise click.UsageError(
            "give at least one setting to change, e.g. --max-attempts 5 (see --help)"
        )
    # A setting given as `default` is reset (None), one not given is kept (left out).
    values = {name: None if value == RESET else value for name, value in given.items()}
    changed: dict[str, Any] = {
        name: value for name, value in values.items() if given[name] is not None
    }
    if group_ordered is not None:
        changed["group_ordered"] = group_ordered
    if fair is not None:
        changed["fair"] = fair
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, create=create)
        policy = client.configure_queue(queue, **changed)
        connection.commit()
    if as_json:
        echo_json({"queue": queue, **to_jsonable(policy)})
        return
    click.echo(f"Configured queue {queue}:")
    click.echo(render_fields(_describe_policy(policy)))


@queue_group.command("cancel")
@click.argument("queue")
@yes_option
@operation
def queue_cancel(queue: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Cancel every live job of QUEUE, whatever its state: pending, scheduled and waiting ones
    never run, running ones are cancelled at once (their workers are told), and the jobs that
    wait for any of them, in any queue, are cancelled too. Each is kept as cancelled for its
    queue's retention (`postkit job ID`). `postkit queue purge` deletes only the pending and
    scheduled ones instead. Asks first, unless --yes; a job pushed while the question waits is
    not cancelled.

    \b
    Example:
      postkit queue cancel exports
      postkit queue cancel exports --yes --json
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue)
        # One cutoff, by the queue's clock, as for purge: a job pushed while the prompt waits
        # is not one the operator agreed to cancel.
        cutoff = client.clock()
        (stats,) = client.stats(queue)
        live = stats.pending + stats.scheduled + stats.waiting + stats.running
        connection.rollback()
        cancelled = 0
        if live:
            confirm(
                f"Cancel {live}{'+' if stats.counts_capped else ''} live job(s) of queue "
                f"{queue} ({stats.running} running), and the jobs that wait for them?",
                yes,
            )
            # A page at a time, each committed: a queue of millions holds no lock for long.
            while done := client.cancel_queue(queue, created_before=cutoff):
                connection.commit()
                cancelled += done
    if as_json:
        echo_json({"queue": queue, "cancelled": cancelled})
    else:
        click.echo(
            f"Cancelled {plural(cancelled, 'job')}: the live jobs of queue {queue} and the "
            "jobs that waited for them."
        )


@queue_group.command("purge")
@click.argument("queue")
@yes_option
@operation
def queue_purge(queue: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Delete every pending and scheduled job of QUEUE. Running jobs are left to their
    workers; dead letters stay (see `postkit dlq purge`). Asks first, unless --yes; a job
    pushed while the question waits is not deleted.

    \b
    Example:
      postkit queue purge send_otp
      postkit queue purge send_otp --yes --json
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue)
        # One cutoff, by the queue's clock, for the count shown and for the delete: a job
        # pushed while the prompt waits is not one the operator agreed to delete.
        cutoff = client.clock()
        waiting = client.purge_queue(queue, created_before=cutoff, dry_run=True)
        connection.rollback()
        deleted = 0
        if waiting:
            confirm(
                f"Delete {waiting} pending and scheduled job(s) of queue {queue}? "
                "This cannot be undone.",
                yes,
            )
            deleted = client.purge_queue(queue, created_before=cutoff)
            connection.commit()
    if as_json:
        echo_json({"queue": queue, "deleted": deleted})
    else:
        click.echo(
            f"Deleted {plural(deleted, 'pending or scheduled job', 'pending and scheduled jobs')}"
            f" of queue {queue}."
        )


@queue_group.command("groups")
@click.argument("queue")
@click.option(
    "--limit",
    metavar="N",
    type=bounded(limits.LIMITS["group_stats"]),
    default=50,
    show_default=True,
    help="Group keys per page.",
)
@click.option(
    "--after",
    metavar="KEY",
    help="Start after this group key: the last one of the previous page.",
)
@operation
def queue_groups(
    queue: str, limit: int, after: str | None, namespace: str, dsn: str | None, as_json: bool
) -> None:
    """Show the group keys of QUEUE that have live jobs (`push(..., group_key=...)`: a
    tenant, a customer), in key order: each key's pending (ready now), scheduled and running
    jobs and its weight in a fair queue. Which tenant is behind, and by how much. Counts over
    100,000 read as 100000+.

    \b
    Example:
      postkit queue groups reports
      postkit queue groups reports --after acme --limit 100
      postkit queue groups reports --json
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue)
        rows = client.group_stats(queue, after=after, limit=limit, cap=_GROUP_CAP)
        connection.rollback()
    next_after = rows[-1].group_key if len(rows) == limit else None
    if as_json:
        echo_json({"queue": queue, "groups": rows, "next_after": next_after})
        return
    if not rows:
        where = "" if after is None else f" after {after!r}"
        click.echo(f"No group key of queue {queue!r} has live jobs{where}.")
        return

    table = [
        [
            row.group_key,
            capped(row.pending, _GROUP_CAP),
            capped(row.scheduled, _GROUP_CAP),
            capped(row.running, _GROUP_CAP),
            row.weight,
        ]
        for row in rows
    ]
    numbers = ["PENDING", "SCHEDULED", "RUNNING", "WEIGHT"]
    click.echo(render_table(["GROUP KEY", *numbers], table, right=numbers))
    if next_after is not None:
        limit_option = "" if limit == 50 else f" --limit {limit}"
        click.echo(
            f"\nNext page: postkit queue groups {shlex.quote(queue)}{limit_option}"
            f" --after {shlex.quote(next_after)}{namespace_argument(namespace)}"
        )


@queue_group.command("weight")
@click.argument("queue")
@click.argument("group_key", required=False)
@click.argument(
    "weight", required=False, metavar="WEIGHT|default", type=OrDefault(bounded(limits.GROUP_WEIGHT))
)
@operation
def queue_weight(
    queue: str,
    group_key: str | None,
    weight: int | str | None,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Show or set the weights of the group keys of fair QUEUE (`postkit queue configure
    QUEUE --fair`): each turn of a group key gives it up to its weight of jobs, so keys of
    weight 3 and 1 get jobs 3:1 while both have work. A key without a weight of its own weighs
    1. With GROUP_KEY and WEIGHT (1 to 1000, or `default` for 1), sets that key's weight; with
    neither, lists the weights set.

    \b
    Example:
      postkit queue weight reports                    the weights set
      postkit queue weight reports acme 3             acme gets three jobs per turn
      postkit queue weight reports acme default       back to 1
    """
    if group_key is not None and weight is None:
        raise click.UsageError("give the key's WEIGHT too, or `default` (see --help)")
    with connect(dsn, namespace) as (connection, client):
        if group_key is None:
            weights = client.group_weights(queue)
            connection.rollback()
            if as_json:
                echo_json({"queue": queue, "weights": weights})
            elif not weights:
                click.echo(f"No group key of queue {queue} has a weight of its own: each weighs 1.")
            else:
                rows = list(weights.items())
                click.echo(render_table(["GROUP KEY", "WEIGHT"], rows, right=["WEIGHT"]))
            return
        new_weight = None if weight == RESET or weight is None else int(weight)
        set_to = client.set_group_weight(queue, group_key, new_weight)
        connection.commit()
    if as_json:
        echo_json({"queue": queue, "group_key": group_key, "weight": set_to})
    else:
        click.echo(f"Group key {group_key} of queue {queue} weighs {set_to}.")
