"""The ``postkit`` command line: one module per command group.

Every command that talks to a database takes ``--dsn``; without it, ``POSTKIT_DSN`` or
``DATABASE_URL`` is used, and without those an embedded PostgreSQL is started (see
:mod:`postkit.embedded`). Errors end with one ``Error:`` line (click adds its usage hint above
a usage mistake) and never show a traceback; the exit code is 2 for a bad argument, 1 otherwise.

Besides install, sql (:mod:`~postkit.cli.install`), demo (:mod:`~postkit.cli.demo`) and worker
(:mod:`~postkit.cli.worker`), the operating commands (jobs, job, push, cancel in
:mod:`~postkit.cli.ops`; stats, dlq, queue, schedule and tick, a module each) take
``--namespace`` and ``--json``; those that delete or redrive ask first unless ``--yes``. A
queue name the namespace has never seen is refused with the known queues (see
:func:`postkit.cli.console.require_known_queue`), unless ``--create`` accepts it where a
command may start a queue. Their shared options live in :mod:`postkit.cli.options`, their table and
argument helpers in :mod:`postkit.cli.output`.
"""

from __future__ import annotations

from typing import Any

import click
import psycopg

from postkit import __version__
from postkit.cli import (
    dashboard,
    db,
    demo,
    dlq,
    install,
    ops,
    queue,
    schedule,
    stats,
    tick,
    worker,
    workers,
    workflow,
)
from postkit.cli.console import BadArgument
from postkit.errors import PostkitError, ValidationError

__all__ = ["main"]


class _FriendlyGroup(click.Group):
    """Turns Postkit and database errors into one readable line: exit code 2 for a value the
    SDK or the SQL module refused (a ValidationError, a bad argument), 1 for the others."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationError as exc:
            raise BadArgument(_one_line(exc)) from exc
        except (PostkitError, psycopg.Error) as exc:
            raise click.ClickException(_one_line(exc)) from exc


def _one_line(exc: Exception) -> str:
    """An error as one line: a server error's primary message (not the statement and context
    psycopg appends), a connection error's lines joined."""
    diag = getattr(exc, "diag", None)
    primary = getattr(diag, "message_primary", None) if isinstance(exc, psycopg.Error) else None
    text = primary or str(exc)
    message = " ".join(line.strip() for line in text.splitlines() if line.strip())
    return message or type(exc).__name__


@click.group(cls=_FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="postkit")
def main() -> None:
    """Postkit: a job queue that lives inside PostgreSQL.

    \b
    Quick start:
      postkit demo                   the OTP story, end to end
      postkit install                install or upgrade the queue schema
      postkit sql | psql "$DSN"      the same, without Python on the database host
      postkit worker tasks           run the job handlers defined in tasks.py

    \b
    Operating the queue (each takes --namespace, --dsn and --json):
      postkit stats                  every queue at a glance (--watch: live, with rates)
      postkit jobs send_otp          a queue's jobs, a page at a time
      postkit job 42                 one job and what became of it (its result)
      postkit push send_otp '{}'     push a job (and postkit cancel JOB_ID)
      postkit workflow show 42       a workflow run's steps (and workflow cancel)
      postkit dlq list               the dead-letter queue (and dlq show, redrive, purge)
      postkit queue pause send_otp   stop handing out a queue's jobs (and resume, configure,
                                     purge)
      postkit queue groups reports   each tenant's (group key's) jobs in a queue
      postkit schedule list          recurring jobs (and schedule create, pause, resume,
                                     delete)
      postkit tick                   rescue expired claims, fire schedules, prune
      postkit workers                which workers and tickers run, and which were lost

    \b
    Watching it:
      postkit dashboard              the web dashboard on http://127.0.0.1:8181 (needs
                                     pip install 'postkit-queue[dashboard]')

    \b
    Without a DSN (--dsn, POSTKIT_DSN, DATABASE_URL) each command starts an embedded
    PostgreSQL:
      postkit db status              where it keeps its data, and whether it runs
      postkit db dsn                 its DSN (keeps it running); postkit db stop stops it
    """


main.add_command(install.install)
main.add_command(install.sql)
main.add_command(demo.demo)
main.add_command(worker.worker)
main.add_command(stats.stats)
main.add_command(ops.jobs)
main.add_command(ops.job)
main.add_command(ops.push)
main.add_command(ops.cancel)
main.add_command(workflow.workflow_group)
main.add_command(dlq.dlq)
main.add_command(queue.queue_group)
main.add_command(schedule.schedule)
main.add_command(tick.tick)
main.add_command(workers.workers)
main.add_command(dashboard.dashboard)
main.add_command(db.db)
