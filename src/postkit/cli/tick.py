"""``postkit tick``: the queue's housekeeping (expired claims, due schedules, retention), once
or in rounds until stopped, for a namespace no worker runs."""

from __future__ import annotations

import json
import signal
import threading
from datetime import datetime, timezone

import click
import psycopg

from postkit.cli.options import operation
from postkit.cli.output import SECONDS, first_line, format_time, plural, printable
from postkit.embedded import resolve_dsn
from postkit.queue.records import to_jsonable
from postkit.worker.maintenance import Maintenance, RoundReport


def _report_round(result: RoundReport, *, as_json: bool, quiet_if_idle: bool) -> None:
    if as_json:
        if result.anything or not quiet_if_idle:
            click.echo(json.dumps(to_jsonable(result), ensure_ascii=False))
        return
    stamp = format_time(result.at)
    if result.rescued:
        click.echo(
            f"{stamp}  rescued {plural(result.rescued, 'expired claim')} "
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
    if any(result.pruned.batches):
        click.echo(
            f"{stamp}  retention deleted {plural(result.pruned.completed_jobs, 'archived job')},"
            f" {plural(result.pruned.dead_letters, 'dead letter')},"
            f" {plural(result.pruned.results, 'job result')},"
            f" {plural(result.pruned.cancelled, 'cancelled job')},"
            f" {plural(result.pruned.ancestry, 'ancestry link')}"
            f" and {plural(result.pruned.steps, 'workflow step')}"
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
    """Do the queue's housekeeping: rescue expired claims (tick_timeouts), fire due schedules
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
    # The worker's own maintenance services, run here in the foreground.
    maintenance = Maintenance.for_tick(resolve_dsn(dsn), namespace, interval=interval)
    if once:
        _report_round(maintenance.run_once(), as_json=as_json, quiet_if_idle=False)
        return

    stop = threading.Event()

    def on_signal(_signum: int, _frame: object) -> None:
        stop.set()

    def on_error(exc: psycopg.Error, delay: float) -> None:
        click.echo(
            f"{format_time(datetime.now(timezone.utc))}  database error: "
            f"{first_line(str(exc))}; retrying in {delay:.1f}s",
            err=True,
        )

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    click.echo(
        f"Ticking namespace {namespace!r} about every {interval:g}s: expired claims, due "
        "schedules, retention. SIGTERM or Ctrl-C stops.",
        err=True,
    )
    try:
        maintenance.run_forever(
            stop,
            lambda result: _report_round(result, as_json=as_json, quiet_if_idle=True),
            on_error=on_error,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("Stopped.", err=True)
