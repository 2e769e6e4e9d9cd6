"""``postkit workers``: the workers and tickers of a namespace, alive or lost."""

from __future__ import annotations

from datetime import datetime

import click

from postkit.cli.console import connect
from postkit.cli.options import operation
from postkit.cli.output import (
    echo_json,
    format_duration,
    format_time,
    printable,
    render_table,
    shorten,
)
from postkit.queue import WorkerInfo


@click.command()
@operation
def workers(namespace: str, dsn: str | None, as_json: bool) -> None:
    """The workers (and `postkit tick` tickers) of the namespace: where each runs, what it
    serves, its last heartbeat, and whether it is lost.

    Each registers when it starts, heartbeats while it runs and leaves on a clean stop. One
    whose last heartbeat is older than three of its heartbeat intervals was killed or cut off:
    it shows as lost, and is forgotten a day after its last heartbeat.

    \b
    Example:
      postkit workers --namespace my-app
      postkit workers --json
    """
    with connect(dsn, namespace) as (_, client):
        rows = client.workers()
        now = client.clock()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No workers registered in namespace {namespace!r}.")
        return
    headers = [
        "WORKER",
        "KIND",
        "HOST",
        "PID",
        "QUEUES",
        "CONCURRENCY",
        "VERSION",
        "STARTED (UTC)",
        "LAST HEARTBEAT",
        "STATUS",
    ]
    table = [
        [
            printable(row.worker_id),
            row.kind,
            printable(row.host),
            row.pid,
            _queues(row.queues),
            row.concurrency,
            printable(row.version),
            format_time(row.started_at),
            _ago(row, now),
            "lost" if row.lost else "alive",
        ]
        for row in rows
    ]
    click.echo(render_table(headers, table, right=["PID", "CONCURRENCY"]))
    lost = sum(row.lost for row in rows)
    if lost:
        click.echo(
            f"\n{lost} lost: no heartbeat for over three heartbeat intervals. Their claimed jobs "
            "come back when their claims expire (tick_timeouts)."
        )


_QUEUES_WIDTH = 60
"""The queues a row shows at most, in characters: a worker may serve thousands of queues, and
one wide cell would pad every row of the table to its width (--json lists them all)."""


def _queues(queues: list[str]) -> str:
    if not queues:
        return "-"
    shown = printable(", ".join(queues))
    if len(shown) <= _QUEUES_WIDTH:
        return shown
    return f"{shorten(shown, _QUEUES_WIDTH)} ({len(queues)} queues)"


def _ago(row: WorkerInfo, now: datetime) -> str:
    return f"{format_duration(max((now - row.heartbeat_at).total_seconds(), 0.0))} ago"
