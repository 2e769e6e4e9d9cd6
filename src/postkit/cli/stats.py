"""``postkit stats``: a namespace's queues at a glance, once or live with --watch."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import click
import psycopg

from postkit.cli.console import (
    connect,
    require_known_queue,
)
from postkit.cli.options import operation
from postkit.cli.output import (
    SECONDS,
    capped,
    echo_json,
    format_duration,
    format_time,
    render_table,
)
from postkit.queue import QueueClient
from postkit.queue.records import Outcomes, QueueStats, to_jsonable

_STATS_CAP = 100_000
"""Where stats stops counting (see QueueClient.stats)."""


@click.command()
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue.")
@click.option(
    "--watch",
    "-w",
    is_flag=True,
    help="A live view: redraw every --interval, with each queue's rates. Ctrl-C stops.",
)
@click.option(
    "--interval",
    type=SECONDS,
    default=2.0,
    show_default=True,
    help="Seconds between redraws of --watch. Also 5s, 1m.",
)
@click.option("--iterations", type=click.IntRange(1), hidden=True, help="Stop after N redraws.")
@operation
def stats(
    queue: str | None,
    watch: bool,
    interval: float,
    iterations: int | None,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Every queue of the namespace at a glance.

    PENDING jobs are ready now, SCHEDULED ones wait for their run time (a delay or a retry's
    backoff), RUNNING ones are claimed, DEAD ones wait in the dead-letter queue (redriven ones
    are not counted); a queue with a concurrency limit shows RUNNING against it (3/20);
    STATE is rate-limited while its rate limit holds claims back, and full while its pending
    and scheduled jobs reach its --max-pending, which refuses pushes (`postkit queue
    configure` sets all three). OLDEST is how long the oldest ready job has waited. The last hour's
    outcomes (docs/concepts.md): COMPLETED by an ack, DEAD-LETTERED, RETRIED after a nack,
    RESCUED by tick_timeouts from an expired claim; ATTEMPTS is the mean attempts of the jobs
    completed. Counts stop at 100,000 (shown as 100000+), so stats stays fast on any backlog.

    --watch redraws the table in place every --interval seconds, with COMPLETED/S and
    DEAD-LETTERED/S: the jobs completed and dead-lettered per second since the previous
    redraw. With --json it prints one JSON object per redraw instead (a line each: at, seconds
    since the previous one, and each queue's stats with completed_per_second and
    dead_lettered_per_second).

    \b
    Example:
      postkit stats --namespace my-app
      postkit stats --queue send_otp --json
      postkit stats --watch --interval 5
    """
    with connect(dsn, namespace) as (connection, client):
        require_known_queue(client, queue, option="--queue")
        if watch:
            _watch_stats(
                connection,
                client,
                queue,
                interval=interval,
                iterations=iterations,
                as_json=as_json,
            )
            return
        rows = client.stats(queue, cap=_STATS_CAP)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No queues in namespace {namespace!r} yet.")
        return
    click.echo(_stats_table(rows))


def _stats_table(
    rows: Sequence[QueueStats], rates: Mapping[str, tuple[float, float]] | None = None
) -> str:
    """The stats table; with ``rates`` (per queue: completed and dead-lettered per second, as
    --watch computes them; empty on its first redraw), their two columns after STATE. A queue with a
    concurrency limit shows RUNNING against it (``3/20``), one whose rate limit holds
    claims back now is ``rate-limited``, and one at its ``max_pending`` is ``full``."""

    def rate(row: QueueStats, which: int) -> str:
        return f"{rates[row.queue][which]:.1f}" if rates and row.queue in rates else "-"

    watching = rates is not None
    headers = ["QUEUE", "STATE", *(["COMPLETED/S", "DEAD-LETTERED/S"] if watching else [])]
    headers += ["PENDING", "SCHEDULED", "WAITING", "RUNNING", "DEAD", "CANCELLED", "OLDEST"]
    headers += ["COMPLETED 1H", "DEAD-LETTERED 1H", "RETRIED 1H", "RESCUED 1H", "ATTEMPTS"]
    table = [
        [
            row.queue,
            "paused"
            if row.paused
            else "full"
            if row.full
            else "rate-limited"
            if row.rate_limited_until is not None
            else "active",
            *([rate(row, 0), rate(row, 1)] if watching else []),
            capped(row.pending, _STATS_CAP),
            capped(row.scheduled, _STATS_CAP),
            capped(row.waiting, _STATS_CAP),
            capped(row.running, _STATS_CAP)
            + ("" if row.concurrency is None else f"/{row.concurrency}"),
            capped(row.dead, _STATS_CAP),
            capped(row.cancelled, _STATS_CAP),
            format_duration(row.oldest_ready_age),
            row.completed_last_hour,
            row.dead_lettered_last_hour,
            row.retried_last_hour,
            row.rescued_last_hour,
            "-" if row.mean_attempts is None else f"{float(row.mean_attempts):.2f}",
        ]
        for row in rows
    ]
    return render_table(headers, table, right=headers[2:])


_CLEAR_SCREEN = "\x1b[H\x1b[2J"
"""ANSI: cursor home, then clear the screen; each --watch frame is drawn from the top."""
_REBASE_AFTER = timedelta(minutes=50)
"""--watch counts outcomes from a fixed minute (see QueueClient.outcomes_since), moved up
before the counters of that minute are pruned (after 2 hours)."""


def _watch_stats(
    connection: psycopg.Connection[Any],
    client: QueueClient,
    queue: str | None,
    *,
    interval: float,
    iterations: int | None,
    as_json: bool,
) -> None:
    """`postkit stats --watch`: redraw until Ctrl-C (or ``iterations`` redraws). Rates are the
    differences of outcomes_since totals between redraws, over the time between them."""
    since = datetime.now(timezone.utc) - timedelta(minutes=5)  # any clock skew is absorbed
    previous: dict[str, Outcomes] | None = None
    previous_at = 0.0
    drawn = 0
    try:
        while True:
            rows = client.stats(queue, cap=_STATS_CAP)
            totals = {o.queue: o for o in client.outcomes_since(since)}
            at = time.monotonic()
            rates: dict[str, tuple[float, float]] = {}
            seconds: float | None = None
            if previous is not None:
                seconds = max(at - previous_at, 1e-9)
                for row in rows:
                    current, before = totals.get(row.queue), previous.get(row.queue)
                    completed = (current.completed if current else 0) - (
                        before.completed if before else 0
                    )
                    dead_lettered = (current.dead_lettered if current else 0) - (
                        before.dead_lettered if before else 0
                    )
                    rates[row.queue] = (
                        max(completed, 0) / seconds,
                        max(dead_lettered, 0) / seconds,
                    )
            if datetime.now(timezone.utc) - since > _REBASE_AFTER:
                since = datetime.now(timezone.utc) - timedelta(minutes=5)
                totals = {o.queue: o for o in client.outcomes_since(since)}
            connection.rollback()  # read-only: hold no snapshot between redraws
            previous, previous_at = totals, at
            stamp = datetime.now(timezone.utc)
            if as_json:
                frame = {
                    "at": stamp,
                    "seconds": seconds,
                    "queues": [
                        {
                            **to_jsonable(row),
                            "completed_per_second": rates[row.queue][0] if rates else None,
                            "dead_lettered_per_second": rates[row.queue][1] if rates else None,
                        }
                        for row in rows
                    ],
                }
                click.echo(json.dumps(to_jsonable(frame), ensure_ascii=False))
            else:
                title = (
                    f"postkit stats --watch: namespace {client.namespace!r}, every "
                    f"{interval:g}s, {format_time(stamp)} UTC. Ctrl-C stops."
                )
                body = _stats_table(rows, rates) if rows else "No queues in this namespace yet."
                click.echo(f"{_CLEAR_SCREEN}{title}\n\n{body}")
            drawn += 1
            if iterations is not None and drawn >= iterations:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        # Ctrl-C may have come halfway through a call, with the connection between a query and
        # its result: nothing more is sent on it, or waited for. Closing it ends the session,
        # and the server rolls back its read-only transaction.
        connection.close()
        click.echo("Stopped.", err=True)
