"""``postkit tick``: the queue's housekeeping (expired claims, due schedules, retention), once
or in rounds until stopped, for a namespace no worker runs."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import signal
import threading
from datetime import datetime, timezone
from typing import Any

import click
import psycopg

from postkit.cli.console import connect
from postkit.cli.options import operation
from postkit.cli.output import SECONDS, first_line, format_time, plural, printable, to_jsonable
from postkit.embedded import resolve_dsn
from postkit.queue import QueueClient
from postkit.queue.job import BrokenSchedule, Fired, Pruned

_TICK_LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class TickRound:
    """What one round of `postkit tick` did."""

    at: datetime
    reclaimed: int
    fired: list[Fired]
    broken: list[BrokenSchedule]
    pruned: Pruned

    @property
    def busy(self) -> bool:
        return bool(self.reclaimed or self.fired or self.broken or self.pruned.completed_jobs)

    @property
    def anything(self) -> bool:
        return self.busy or bool(self.pruned.dead_letters)

    @property
    def full(self) -> bool:
        """A batch was full: more may be waiting, so the next round comes at once."""
        return (
            self.reclaimed >= _TICK_LIMIT
            or max(self.pruned.completed_jobs, self.pruned.dead_letters) >= _TICK_LIMIT
        )


def tick_round(connection: psycopg.Connection[Any], client: QueueClient) -> TickRound:
    """Reclaim expired claims, fire due schedules, apply retention: each step committed."""
    reclaimed = client.tick_timeouts(limit=_TICK_LIMIT)
    connection.commit()
    schedules = client.tick_schedules()
    connection.commit()
    pruned = client.prune(limit=_TICK_LIMIT)
    connection.commit()
    fired = [outcome for outcome in schedules if isinstance(outcome, Fired)]
    broken = [outcome for outcome in schedules if isinstance(outcome, BrokenSchedule)]
    return TickRound(datetime.now(timezone.utc), reclaimed, fired, broken, pruned)


def _until_next_schedule(connection: psycopg.Connection[Any], client: QueueClient) -> float:
    """Seconds until the namespace's next active schedule falls due (a little more than 0
    when one is due now, and never more than a day): the ticker wakes for it."""
    due = client.next_schedule_at()
    connection.rollback()
    return 86_400.0 if due.seconds is None else min(max(due.seconds, 0.02), 86_400.0)


def _report_round(result: TickRound, *, as_json: bool, quiet_if_idle: bool) -> None:
    if as_json:
        if result.anything or not quiet_if_idle:
            click.echo(json.dumps(to_jsonable(result), ensure_ascii=False))
        return
    stamp = format_time(result.at)
    if result.reclaimed:
        click.echo(
            f"{stamp}  reclaimed {plural(result.reclaimed, 'expired claim')} "
            "(back to pending, or dead-lettered when out of attempts)"
        )
    for fired in result.fired:
        click.echo(
            f"{stamp}  schedule {fired.name} pushed job {fired.job_id}; next run "
            f"{format_time(fired.next_run_at)} UTC"
        )
    for broken in result.broken:
        click.echo(
            f"{stamp}  schedule {broken.name} is broken and no longer fires: "
            f"{printable(first_line(broken.reason))} (create it again to repair it)"
        )
    if result.pruned.completed_jobs or result.pruned.dead_letters:
        click.echo(
            f"{stamp}  retention deleted {plural(result.pruned.completed_jobs, 'archived job')}"
            f" and {plural(result.pruned.dead_letters, 'dead letter')}"
        )
    if not result.anything and not quiet_if_idle:
        click.echo(f"{stamp}  nothing to do: no expired claims, no due schedules, nothing to prune")


@click.command()
@click.option("--once", is_flag=True, help="Do one round and exit.")
@click.option(
    "--interval",
    type=SECONDS,
    default=5.0,
    show_default=True,
    help="Mean seconds between rounds (each is jittered by up to a quarter, so many tickers "
    "spread out). Also 5s, 1m.",
)
@operation
def tick(once: bool, interval: float, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Do the queue's housekeeping: reclaim expired claims (tick_timeouts), fire due schedules
    (tick_schedules) and apply retention (prune), each in a transaction of its own.

    Every `postkit worker` does this on its own; run `postkit tick` when no worker runs the
    namespace, or when its jobs are worked from another language. Between rounds it also wakes
    when the next schedule falls due, so schedules fire on time whatever the interval. Any
    number of tickers may run at once. It prints a line for each thing it does (--json: one
    object per round) and stops cleanly on SIGTERM or Ctrl-C. A lost database connection is
    retried with backoff.

    \b
    Example:
      postkit tick --namespace my-app                 every 5 seconds, until stopped
      postkit tick --once                             one round, e.g. from cron
      postkit tick --interval 30 --json
    """
    resolved = resolve_dsn(dsn)
    if once:
        with connect(resolved, namespace) as (single, client):
            result = tick_round(single, client)
        _report_round(result, as_json=as_json, quiet_if_idle=False)
        return

    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    click.echo(
        f"Ticking namespace {namespace!r} about every {interval:g}s: expired claims, due "
        "schedules, retention. SIGTERM or Ctrl-C stops.",
        err=True,
    )
    connection: psycopg.Connection[Any] | None = None
    failures = 0
    try:
        while not stop.is_set():
            try:
                if connection is None:
                    connection = psycopg.connect(resolved)
                client = QueueClient(connection.cursor(), namespace=namespace)
                result = tick_round(connection, client)
            except psycopg.Error as exc:
                failures += 1
                delay = min(60.0, interval * 2 ** min(failures, 6)) * random.uniform(0.5, 1.0)
                click.echo(
                    f"{format_time(datetime.now(timezone.utc))}  database error: "
                    f"{first_line(str(exc))}; retrying in {delay:.1f}s",
                    err=True,
                )
                if connection is not None:
                    with contextlib.suppress(psycopg.Error):
                        connection.close()
                    connection = None
                stop.wait(delay)
                continue
            failures = 0
            _report_round(result, as_json=as_json, quiet_if_idle=True)
            if not result.full:
                stop.wait(
                    min(
                        interval * random.uniform(0.75, 1.25),
                        _until_next_schedule(connection, client),
                    )
                )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if connection is not None:
            connection.close()
    click.echo("Stopped.", err=True)
