"""The ``postkit`` command line.

Every command that talks to a database takes ``--dsn``; without it, ``POSTKIT_DSN`` or
``DATABASE_URL`` is used, and without those an embedded PostgreSQL is started (see
:mod:`postkit.embedded`). Errors print one line and exit non-zero; they never show a traceback.

Besides install, sql, demo and worker, the operating commands (stats, jobs, dlq, queue,
schedule, tick) each take ``--namespace`` and ``--json``; those that delete or retry ask first
unless ``--yes``. Their table and argument helpers live in :mod:`postkit.cli_format`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import os
import random
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import click
import psycopg

from postkit import __version__
from postkit.cli_format import (
    DURATION,
    SECONDS,
    TIME,
    compact_json,
    echo_json,
    first_line,
    format_duration,
    format_time,
    plural,
    render_fields,
    render_table,
    shorten,
    to_jsonable,
)
from postkit.embedded import resolve_dsn
from postkit.errors import PostkitError
from postkit.queue import (
    DeadLetter,
    Job,
    QueueClient,
    install_script,
    installed_version,
    latest_version,
)
from postkit.queue import install as install_queue
from postkit.queue.admin import (
    ACCESS_KINDS,
    Access,
    assign_namespace,
    enable_tenant_isolation,
    grant_access,
)
from postkit.queue.job import Fired, Pruned, QueueStats, Redriven, Schedule
from postkit.queue.protocol import JOB_STATES as _JOB_STATES

if TYPE_CHECKING:
    from postkit.queue.worker import Handlers

F = TypeVar("F", bound=Callable[..., Any])

_DSN_HELP = (
    "PostgreSQL connection string. Default: $POSTKIT_DSN, then $DATABASE_URL, then an embedded "
    "PostgreSQL in $POSTKIT_DATA_DIR (started on demand)."
)


def dsn_option(command: F) -> F:
    return click.option("--dsn", metavar="DSN", help=_DSN_HELP)(command)


def json_option(command: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON, for scripts.")(command)


class _FriendlyGroup(click.Group):
    """Turns Postkit and database errors into one readable line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
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
      postkit demo                   the article's story, end to end
      postkit install                install or upgrade the queue schema
      postkit sql | psql "$DSN"      the same, without Python on the database host
      postkit worker tasks           run the job handlers defined in tasks.py

    \b
    Operating the queue (each takes --namespace, --dsn and --json):
      postkit stats                  every queue at a glance
      postkit jobs send_otp          a queue's jobs, a page at a time
      postkit dlq list               the dead-letter queue (and dlq show, retry, purge)
      postkit queue pause send_otp   stop handing out a queue's jobs (and resume, purge)
      postkit schedule list          recurring jobs (and schedule create, pause, delete)
      postkit tick                   reclaim expired claims, fire schedules, prune
    """


def _role_access(value: str) -> tuple[str, Access]:
    role, _, access = value.partition(":")
    access = access or "worker"
    if not role or access not in ACCESS_KINDS:
        raise click.BadParameter(
            f"expected ROLE or ROLE:KIND with KIND one of {', '.join(ACCESS_KINDS)}, got {value!r}"
        )
    return role, access


def _namespace_role(value: str) -> tuple[str, str]:
    namespace, _, role = value.partition("=")
    if not namespace or not role:
        raise click.BadParameter(f"expected NAMESPACE=ROLE, got {value!r}")
    return namespace, role


@main.command()
@dsn_option
@json_option
@click.option(
    "--grant",
    "grants",
    multiple=True,
    metavar="ROLE[:KIND]",
    help="Give a database role what it needs and no more: KIND is producer (push), worker "
    "(pull and settle; the default) or operator (everything). Repeatable.",
)
@click.option(
    "--tenant-isolation",
    is_flag=True,
    help="Turn on row-level security: each role sees only the namespaces assigned to it.",
)
@click.option(
    "--assign",
    "assignments",
    multiple=True,
    metavar="NAMESPACE=ROLE",
    help="Let ROLE (and its members) use NAMESPACE under tenant isolation. Repeatable.",
)
def install(
    dsn: str | None,
    as_json: bool,
    grants: tuple[str, ...],
    tenant_isolation: bool,
    assignments: tuple[str, ...],
) -> None:
    """Install the queue schema (postkit_queue), or upgrade it in place.

    Idempotent: each migration is applied once and recorded in
    postkit_queue.migrations; a second run changes nothing.

    \b
    A role layout (create the roles first; run this as the schema's owner):
      postkit install --grant shop_web:producer --grant shop_worker:worker \\
                      --grant shop_ops:operator
      postkit install --tenant-isolation --assign shop=shop_web --assign shop=shop_worker
    """
    role_grants = [_role_access(value) for value in grants]
    namespace_roles = [_namespace_role(value) for value in assignments]
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        result = install_queue(connection)
        with connection.transaction(), connection.cursor() as cursor:
            for role, access in role_grants:
                grant_access(cursor, role, access)
            for namespace, role in namespace_roles:
                assign_namespace(cursor, namespace, role)
            if tenant_isolation:
                enable_tenant_isolation(cursor)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "previous_version": result.previous_version,
                    "version": result.version,
                    "applied": list(result.applied),
                    "granted": [{"role": role, "access": access} for role, access in role_grants],
                    "assigned": [
                        {"namespace": namespace, "role": role}
                        for namespace, role in namespace_roles
                    ],
                    "tenant_isolation": tenant_isolation,
                }
            )
        )
        return
    if result.applied:
        applied = ", ".join(str(version) for version in result.applied)
        click.echo(
            f"postkit_queue upgraded from version {result.previous_version} to "
            f"{result.version} (applied migrations {applied})"
        )
    else:
        click.echo(f"postkit_queue is up to date at version {result.version}")
    for role, access in role_grants:
        click.echo(f"granted {access} access to {role}")
    for namespace, role in namespace_roles:
        click.echo(f"assigned namespace {namespace} to {role}")
    if tenant_isolation:
        click.echo("tenant isolation is on: each role sees only its own namespaces")


@main.command()
@click.option(
    "--target-version",
    type=click.IntRange(1, latest_version()),
    default=None,
    help="Stop after this migration (default: the newest).",
)
@click.option(
    "--no-transaction",
    is_flag=True,
    help="Leave out BEGIN/COMMIT, to embed the script in your own migration.",
)
def sql(target_version: int | None, no_transaction: bool) -> None:
    """Print the queue's install script: plain SQL, idempotent, upgrades in place.

    \b
    Example:
      postkit sql | psql -v ON_ERROR_STOP=1 "$DATABASE_URL"
    """
    click.echo(
        install_script(target_version=target_version, transaction=not no_transaction), nl=False
    )


@main.command()
@dsn_option
@json_option
@click.option(
    "--users",
    type=click.IntRange(8, 200),
    default=12,
    show_default=True,
    help="How many users to register.",
)
def demo(dsn: str | None, as_json: bool, users: int) -> None:
    """Tell the article's story end to end: transactional push, three workers, retries with
    backoff, the dead-letter queue, a SIGKILLed worker rescued by tick_timeouts and its stale
    ack refused.

    It uses the namespace "postkit-demo" and the schema "postkit_demo", and clears both first.
    """
    from postkit.demo import render_summary, run_demo

    summary = run_demo(
        resolve_dsn(dsn), users=users, say=(lambda _line: None) if as_json else click.echo
    )
    if as_json:
        click.echo(json.dumps(summary.as_json()))
    else:
        click.echo(render_summary(summary))


_WORKER_HELP = """Run the job handlers of MODULE: claim jobs, run them, then ack, retry or
dead-letter each one.

MODULE is a dotted module path, importable from the current directory (e.g. tasks, or
myapp.tasks), that defines one Handlers instance; when it defines several, name one as
module:attribute. The worker serves every queue the Handlers registers, or the --queue ones.

\b
Example: tasks.py
  from postkit.errors import PermanentError, RetryLater
  from postkit.queue.worker import Handlers
  handlers = Handlers()
  @handlers.register("send_email")
  def send_email(job):          # return: ack; an exception: retry with backoff
      if "to" not in job.payload:
          raise PermanentError("no recipient")   # to the dead-letter queue now
      if mailer.rate_limited():
          raise RetryLater(delay=60)             # retry in a minute
      mailer.send(job.payload["to"], job.payload["subject"])
  @handlers.register("resize_image")
  async def resize_image(job):  # async handlers run on an event loop
      await images.resize(job.payload["path"])

\b
Then:
  postkit worker tasks                       every queue, 8 jobs at a time
  postkit worker tasks -q send_email -c 32   one queue, 32 at a time
  postkit worker tasks --processes 4 -v      4 processes, a log line per job
  postkit worker myapp.jobs:handlers         name the Handlers instance

\b
and push jobs from your application, in its own transaction:
  QueueClient(cursor).push("send_email", {"to": "ada@example.com"})

Quiet by default: warnings, and a throughput line every --report-interval seconds.
-v logs each job; --log-format json writes each log line as one JSON object
(ts, level, logger, message, event, job_id, queue, attempt, duration_ms, ...).

SIGTERM or Ctrl-C stops claiming; claimed jobs get --grace-period seconds to finish, then
those not started are released to run elsewhere; a job whose handler still runs keeps its
claim until the handler returns or --handler-timeout passes. A second signal exits at once.
With --processes N, a supervisor runs N worker processes, restarts any that dies, and passes
signals on.
"""


def load_handlers(spec: str) -> tuple[Handlers, str]:
    """Import ``module`` or ``module:attribute`` (the current directory first on sys.path) and
    return its :class:`~postkit.queue.worker.Handlers` and a name for it.

    Raises:
        click.ClickException: the module cannot be found, or does not define exactly one
            Handlers (or the named attribute is not one).
    """
    from postkit.queue.worker import Handlers

    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise click.BadParameter("name a module, e.g. tasks or myapp.tasks", param_hint="MODULE")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the module itself (or its package) missing is our error to report in one line;
        # an import failing inside the user's module keeps its traceback.
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise
        hint = ""
        if module_name.endswith(".py"):
            hint = f"; name the module, not the file: {module_name[:-3].replace('/', '.')}"
        raise click.ClickException(
            f"cannot import {module_name}: no module named {exc.name!r} in the current "
            f"directory or on sys.path{hint}"
        ) from None
    if attribute:
        value = getattr(module, attribute, None)
        if not isinstance(value, Handlers):
            what = "is not defined" if value is None else f"is a {type(value).__name__}"
            raise click.ClickException(f"{spec} {what}, not a postkit Handlers")
        handlers, name = value, spec
    else:
        found: dict[int, tuple[str, Handlers]] = {}
        for key, value in vars(module).items():
            if isinstance(value, Handlers):
                found.setdefault(id(value), (key, value))
        if not found:
            raise click.ClickException(
                f"{module_name} defines no Handlers; create one with `handlers = Handlers()` "
                "(from postkit.queue.worker import Handlers) and register functions on it"
            )
        if len(found) > 1:
            names = sorted(key for key, _ in found.values())
            raise click.ClickException(
                f"{module_name} defines several Handlers ({', '.join(names)}); name one, "
                f"e.g. {module_name}:{names[0]}"
            )
        ((key, handlers),) = found.values()
        name = f"{module_name}:{key}"
    if not handlers:
        raise click.ClickException(
            f"{name} registers no handlers; add one with @handlers.register('queue_name')"
        )
    return handlers, name


def _check_schema(dsn: str) -> None:
    """Fail early, in one line, when the database is unreachable or lacks the queue schema."""
    from postkit.errors import SchemaNotInstalledError

    with psycopg.connect(dsn) as connection:
        version = installed_version(connection.cursor())
    if version < latest_version():
        raise SchemaNotInstalledError(
            f"the queue schema is not installed (or older than version {latest_version()}) "
            "in this database; run `postkit install` first"
        )


@main.command(help=_WORKER_HELP)
@click.argument("module", metavar="MODULE")
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="A queue to work; repeat for several. Default: every queue MODULE registers.",
)
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Jobs run at once, per process.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    default=None,
    help="Jobs claimed ahead of free slots, per process [default: as many as --concurrency].",
)
@click.option(
    "-p",
    "--processes",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="Worker processes; more than 1 runs a supervisor that restarts any that dies.",
)
@click.option("--namespace", default="default", show_default=True, help="The jobs' namespace.")
@click.option(
    "--worker-id",
    metavar="ID",
    help="The name jobs are claimed under. Default: HOSTNAME-PID; with --processes, ID-0, "
    "ID-1, ...",
)
@click.option(
    "--visibility-timeout",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Seconds a claim lasts between heartbeats; a dead worker's jobs return after it. "
    "Overrides each queue's policy (`configure_queue(visibility_timeout=...)`) [default: the "
    "queue's policy, 30 s unless set].",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM before they are released.",
)
@click.option(
    "--handler-timeout",
    type=click.FloatRange(0),
    default=3600.0,
    show_default=True,
    help="Seconds a handler may run (unless its registration names a timeout); past it the "
    "attempt counts as timed out and the job is retried. 0: no limit.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Longest wait between pulls when no notification arrives [default: 5; with --pooler, 1].",
)
@click.option(
    "--pooler",
    is_flag=True,
    help="The DSN leads to a pooler in transaction mode (PgBouncer): keep no session state "
    "(no prepared statements, no session settings, no LISTEN, no vacuum service) and poll "
    "every --poll-interval seconds instead of waiting for notifications.",
)
@click.option(
    "--report-interval",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="Seconds between throughput lines; 0 turns them off.",
)
@click.option(
    "--vacuum-interval",
    type=click.FloatRange(0),
    default=2.0,
    show_default=True,
    help="Seconds between looks at the jobs table's dead rows; past 10,000 the worker vacuums "
    "it, so claims stay fast between autovacuum's visits. 0 leaves it to autovacuum.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every job (claimed, acked, retried...).")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with the event fields.",
)
@click.option("--supervised", is_flag=True, hidden=True)
@dsn_option
def worker(
    module: str,
    queues: tuple[str, ...],
    concurrency: int,
    prefetch: int | None,
    processes: int,
    namespace: str,
    worker_id: str | None,
    visibility_timeout: float | None,
    grace_period: float,
    handler_timeout: float,
    poll_interval: float | None,
    pooler: bool,
    report_interval: float,
    vacuum_interval: float,
    verbose: bool,
    log_format: str,
    supervised: bool,
    dsn: str | None,
) -> None:
    from postkit.logs import ThroughputReport, configure_logging
    from postkit.queue.supervisor import Supervisor
    from postkit.queue.worker import Worker

    handlers, name = load_handlers(module)
    queues = tuple(dict.fromkeys(queues))
    unknown = [queue for queue in queues if queue not in handlers]
    if unknown:
        raise click.BadParameter(
            f"{name} has no handler for {', '.join(map(repr, unknown))}; "
            f"it registers {', '.join(map(repr, handlers))}",
            param_hint="'--queue'",
        )
    configure_logging(verbose, log_format)
    resolved = resolve_dsn(dsn)
    _check_schema(resolved)

    if processes > 1:
        base = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        common = [
            *(["--verbose"] if verbose else []),
            *(argument for queue in queues for argument in ("--queue", queue)),
            *("--namespace", namespace, "--concurrency", str(concurrency)),
            *(() if prefetch is None else ("--prefetch", str(prefetch))),
            *(
                ()
                if visibility_timeout is None
                else ("--visibility-timeout", str(visibility_timeout))
            ),
            *("--grace-period", str(grace_period)),
            *(() if poll_interval is None else ("--poll-interval", str(poll_interval))),
            *(["--pooler"] if pooler else []),
            *("--handler-timeout", str(handler_timeout)),
            *("--report-interval", str(report_interval), "--log-format", log_format),
            *("--vacuum-interval", str(vacuum_interval)),
        ]
        commands = [
            [
                *(sys.executable, "-m", "postkit.cli", "worker", module, "--processes", "1"),
                *("--worker-id", f"{base}-{index}", "--supervised", *common),
            ]
            for index in range(processes)
        ]
        # The DSN goes through the environment, not the command line that `ps` shows.
        env = {**os.environ, "POSTKIT_DSN": resolved}
        sys.exit(Supervisor(commands, env=env).run())

    report = ThroughputReport(prefix=supervised)
    runner = Worker(
        resolved,
        handlers,
        namespace=namespace,
        queues=list(queues) or None,
        worker_id=worker_id,
        concurrency=concurrency,
        prefetch=prefetch,
        visibility_timeout=visibility_timeout,
        poll_interval=poll_interval,
        pooler=pooler,
        grace_period=grace_period,
        handler_timeout=handler_timeout or None,
        report_interval=report_interval or None,
        report=report,
        vacuum_interval=vacuum_interval or None,
    )
    report.worker_id = runner.worker_id
    runner.run()
    if report_interval:
        report(runner.stats)  # the jobs settled since the last line


# -------------------------------------------------------------------------------------------
# Operating the queue: stats, jobs, dead letters, queues, schedules, the ticker.
#
# Every command opens its own connection and commits after each write: the CLI owns its
# transaction, unlike the SDK, which writes in its caller's.
# -------------------------------------------------------------------------------------------

_NAMESPACE_HELP = "The application's namespace; a command sees and changes only its own jobs."
_SHOWN_BEFORE_CONFIRMING = 20
"""Dead letters listed before a retry's confirmation; the rest are counted."""
_STATS_CAP = 100_000
"""Where stats stops counting (see QueueClient.stats)."""


def namespace_option(command: F) -> F:
    return click.option(
        "--namespace", default="default", show_default=True, metavar="NAME", help=_NAMESPACE_HELP
    )(command)


def yes_option(command: F) -> F:
    return click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")(command)


def _operation(command: F) -> F:
    """The options every operating command takes: --namespace, --dsn and --json."""
    return namespace_option(dsn_option(json_option(command)))


@contextlib.contextmanager
def _client(dsn: str | None, namespace: str) -> Iterator[QueueClient]:
    """A QueueClient on a connection of the CLI's own, closed afterwards."""
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        yield QueueClient(connection.cursor(), namespace=namespace)


def _commit(client: QueueClient) -> None:
    client.cursor.connection.commit()


def _rollback(client: QueueClient) -> None:
    client.cursor.connection.rollback()


def _confirm(question: str, yes: bool) -> None:
    """Ask on stderr (stdout stays clean for --json); declining aborts with exit code 1."""
    if not yes:
        click.confirm(question, abort=True, err=True)


def _ns(namespace: str) -> str:
    """The --namespace argument to repeat in a suggested command, when not the default."""
    return "" if namespace == "default" else f" --namespace {namespace}"


def _last_error(errors_: Sequence[Mapping[str, Any]]) -> str:
    return first_line(str(errors_[-1].get("error") or "")) if errors_ else ""


@main.command()
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue.")
@_operation
def stats(queue: str | None, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Every queue of the namespace at a glance.

    PENDING jobs are ready now, SCHEDULED ones wait for their run time (a delay or a retry's
    backoff), RUNNING ones are claimed, DEAD ones wait in the dead-letter queue (redriven ones
    are not counted). OLDEST is how long the oldest ready job has waited. The last hour's
    outcomes: DONE acked, FAILED dead-lettered, RETRIED nacked, RESCUED reclaimed by
    tick_timeouts; ATTEMPTS is the mean attempts of the jobs done. Counts stop at 100,000
    (shown as 100000+), so stats stays fast on any backlog.

    \b
    Example:
      postkit stats --namespace my-app
      postkit stats --queue send_otp --json
    """
    with _client(dsn, namespace) as client:
        rows = client.stats(queue, cap=_STATS_CAP)
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"No queues in namespace {namespace!r} yet.")
        return

    def count(row: QueueStats, value: int) -> str:
        return f"{value}+" if row.counts_capped and value >= _STATS_CAP else str(value)

    headers = ["QUEUE", "STATE", "PENDING", "SCHEDULED", "RUNNING", "DEAD", "OLDEST"]
    headers += ["DONE 1H", "FAILED 1H", "RETRIED 1H", "RESCUED 1H", "ATTEMPTS"]
    table = [
        [
            row.queue,
            "paused" if row.paused else "active",
            count(row, row.pending),
            count(row, row.scheduled),
            count(row, row.running),
            count(row, row.dead),
            format_duration(row.oldest_ready_age),
            row.completed_last_hour,
            row.failed_last_hour,
            row.retried_last_hour,
            row.rescued_last_hour,
            "-" if row.mean_attempts is None else f"{float(row.mean_attempts):.2f}",
        ]
        for row in rows
    ]
    click.echo(render_table(headers, table, right=headers[2:]))


_JOB_TIME_COLUMN = {
    "pending": "READY SINCE (UTC)",
    "scheduled": "RUNS AT (UTC)",
    "running": "CLAIM ENDS (UTC)",
    "dead": "FAILED (UTC)",
}


@main.command()
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
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="Page size.",
)
@click.option(
    "--after-id",
    type=click.IntRange(0),
    default=0,
    metavar="ID",
    help="Start after this job id: the cursor the previous page printed.",
)
@_operation
def jobs(
    queue: str,
    state: str,
    limit: int,
    after_id: int,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """The jobs of QUEUE in one state, oldest id first, a page at a time.

    A full page ends with the command for the next one (its --after-id cursor); --json gives
    the cursor as next_after_id (null on the last page).

    \b
    Example:
      postkit jobs send_otp
      postkit jobs send_otp --state running --limit 20
      postkit jobs send_otp --state scheduled --after-id 4211
    """
    with _client(dsn, namespace) as client:
        rows = client.jobs(queue, state, limit=limit, after_id=after_id)
    next_after_id = rows[-1].id if len(rows) == limit else None
    if as_json:
        echo_json({"jobs": rows, "next_after_id": next_after_id})
        return
    if not rows:
        where = "" if after_id == 0 else f" after id {after_id}"
        click.echo(f"No {state} jobs in queue {queue!r}{where}.")
        return

    def moment(job: Job) -> str:
        if state == "running":
            return format_time(job.visible_until)
        if state == "dead":
            return format_time(job.failed_at)
        return format_time(job.run_at)

    headers = ["ID", "ATTEMPTS", "PRIORITY", _JOB_TIME_COLUMN[state], "WORKER"]
    headers += ["PAYLOAD", "LAST ERROR"]
    table = [
        [
            job.id,
            f"{job.attempts}/{job.max_attempts}",
            job.priority,
            moment(job),
            job.worker_id,
            shorten(compact_json(job.payload), 40),
            shorten(_last_error(job.errors), 60) or None,
        ]
        for job in rows
    ]
    click.echo(render_table(headers, table, right=["ID", "ATTEMPTS", "PRIORITY"]))
    if next_after_id is not None:
        state_option = "" if state == "pending" else f" --state {state}"
        limit_option = "" if limit == 50 else f" --limit {limit}"
        click.echo(
            f"\nNext page: postkit jobs {queue}{state_option}{limit_option}"
            f" --after-id {next_after_id}{_ns(namespace)}"
        )


# --- dead letters ----------------------------------------------------------------------------


@main.group()
def dlq() -> None:
    """Investigate and retry dead letters: the jobs the queue gave up on.

    A job is dead-lettered when a handler fails it for good, when its attempts run out, or
    when its last claim expires. It is kept with its payload and every attempt's error until
    its queue's retention (30 days by default) prunes it.

    \b
    Example:
      postkit dlq list --since 1h
      postkit dlq show 42
      postkit dlq retry 42 --dry-run
      postkit dlq retry --queue send_otp --error "Meta is down" --yes
      postkit dlq purge --older-than 30d
    """


@dlq.command("list")
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue.")
@click.option("--since", type=TIME, help="Failed at or after: a duration ago (2h) or a time.")
@click.option("--until", type=TIME, help="Failed before: a duration ago (30m) or a time.")
@click.option("--error", "error_contains", metavar="TEXT", help="The last error contains TEXT.")
@click.option("--include-redriven", is_flag=True, help="Also the dead letters already retried.")
@click.option(
    "--limit",
    metavar="N",
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="At most.",
)
@_operation
def dlq_list(
    queue: str | None,
    since: datetime | None,
    until: datetime | None,
    error_contains: str | None,
    include_redriven: bool,
    limit: int,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """The dead letters, newest first, with their last error.

    --since and --until take a duration ago (30s, 5m, 2h, 7d) or an ISO time
    (2025-01-31T09:00, UTC unless it names an offset). --error matches a substring of the
    last error, ignoring case.

    \b
    Example:
      postkit dlq list
      postkit dlq list --queue send_otp --since 2h --error "503"
      postkit dlq list --since 2025-01-31T09:00 --until 2025-01-31T10:00 --json
    """
    with _client(dsn, namespace) as client:
        rows = client.dead_letters(
            queue,
            limit=limit,
            failed_after=since,
            failed_before=until,
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
    headers = ["JOB", "QUEUE", "FAILED (UTC)", "REASON", "ATTEMPTS", "PAYLOAD", "LAST ERROR"]
    if include_redriven:
        headers.append("REDRIVEN AS")
    table = [
        [
            dead.job_id,
            dead.queue,
            format_time(dead.failed_at),
            dead.reason,
            f"{dead.attempts}/{dead.max_attempts}",
            shorten(compact_json(dead.payload), 30),
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
@click.argument("job_id", type=click.IntRange(1))
@click.option("--full", is_flag=True, help="Every error in full, with its traceback.")
@_operation
def dlq_show(job_id: int, full: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """One dead letter: its payload and every attempt's error, one attempt per line.

    \b
    Example:
      postkit dlq show 42
      postkit dlq show 42 --full      each error with its traceback
    """
    with _client(dsn, namespace) as client:
        job = client.get_job(job_id)
        if job is None:
            raise click.ClickException(
                f"no job {job_id} in namespace {namespace!r}: never pushed, in another "
                "namespace, or completed (acknowledged jobs leave the queue)"
            )
        if job.state != "dead":
            raise click.ClickException(
                f"job {job_id} is not a dead letter: it is {job.state} in queue {job.queue!r} "
                f"(see `postkit jobs {job.queue} --state {job.state}{_ns(namespace)}`)"
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
        ("payload", compact_json(job.payload)),
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
                ("redriven", f"no (retry it: postkit dlq retry {job.id}{_ns(namespace)})")
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
                click.echo(f"      {extra}".rstrip())


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


@dlq.command("retry")
@click.argument("job_ids", nargs=-1, type=click.IntRange(1), metavar="[JOB_ID]...")
@click.option("--queue", "-q", metavar="QUEUE", help="The dead letters of this queue.")
@click.option("--error", "error_contains", metavar="TEXT", help="Whose last error contains TEXT.")
@click.option("--since", type=TIME, help="Failed at or after: a duration ago (2h) or a time.")
@click.option("--until", type=TIME, help="Failed before: a duration ago (30m) or a time.")
@click.option("--all", "every", is_flag=True, help="Every dead letter of the namespace.")
@click.option("--to-queue", metavar="QUEUE", help="Push the new jobs here instead.")
@click.option(
    "--limit",
    metavar="N",
    type=click.IntRange(1, 100_000),
    default=1000,
    show_default=True,
    help="Retry at most this many.",
)
@click.option("--dry-run", is_flag=True, help="Only show what would be retried.")
@yes_option
@_operation
def dlq_retry(
    job_ids: tuple[int, ...],
    queue: str | None,
    error_contains: str | None,
    since: datetime | None,
    until: datetime | None,
    every: bool,
    to_queue: str | None,
    limit: int,
    dry_run: bool,
    yes: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Retry dead letters as new jobs with fresh attempts: the JOB_IDs given, or every one
    matching the filters (--all: every one).

    Each dead letter is retried at most once, even by two operators at once; it stays in the
    dead-letter queue, linked to its new job. Shows what it will retry and asks first, unless
    --yes. Exits 1 when a JOB_ID given is not a dead letter (or was already retried).

    \b
    Example:
      postkit dlq retry 42 --dry-run
      postkit dlq retry 42 43 --yes
      postkit dlq retry --queue send_otp --error "Meta is down" --since 2h
      postkit dlq retry --queue send_otp --to-queue send_otp_slow --all --yes
    """
    filters = (queue, error_contains, since, until)
    if not job_ids and not every and all(value is None for value in filters):
        raise click.UsageError(
            "say which dead letters to retry: JOB_IDs, or --queue, --error, --since, --until, "
            "or --all for every one"
        )
    with _client(dsn, namespace) as client:
        planned = client.redrive(
            list(job_ids) or None,
            queue=queue,
            failed_after=since,
            failed_before=until,
            error_contains=error_contains,
            to_queue=to_queue,
            limit=limit,
            dry_run=True,
        )
        _rollback(client)  # the dry run locked what it looked at; nothing changed
        found = {row.job_id for row in planned}
        missing = [job_id for job_id in dict.fromkeys(job_ids) if job_id not in found]
        details = {
            row.job_id: client.get_job(row.job_id) for row in planned[:_SHOWN_BEFORE_CONFIRMING]
        }
        _rollback(client)
        if dry_run or not planned:
            retried: list[Redriven] = []
        else:
            if not yes:
                _show_planned(planned, details, to_queue, to_stderr=as_json)
            what = "as a new job" if len(planned) == 1 else "as new jobs"
            _confirm(f"Retry {plural(len(planned), 'dead letter')} {what}?", yes)
            retried = client.redrive(
                [row.job_id for row in planned], to_queue=to_queue, limit=len(planned)
            )
            _commit(client)
    matching = "" if all(value is None for value in filters) else " matching the filters"
    for job_id in missing:
        click.echo(
            f"job {job_id} is not in the dead-letter queue of namespace {namespace!r}{matching},"
            " or was already retried",
            err=True,
        )
    if as_json:
        echo_json(
            {
                "dry_run": dry_run,
                "retried": planned if dry_run else retried,
                "missing": missing,
            }
        )
    elif dry_run:
        if planned:
            _show_planned(planned, details, to_queue, to_stderr=False, dry_run=True)
            click.echo("Dry run: nothing changed.")
        else:
            click.echo("No dead letters match; nothing would be retried.")
    elif not planned:
        click.echo("No dead letters match; nothing retried.")
    else:
        what = "as a new job" if len(retried) == 1 else "as new jobs"
        click.echo(f"Retried {plural(len(retried), 'dead letter')} {what}:")
        table = [[row.job_id, row.queue, row.new_job_id] for row in retried]
        headers = ["JOB", "QUEUE", "NEW JOB"]
        click.echo(_indent(render_table(headers, table, right=["JOB", "NEW JOB"])))
        if len(retried) < len(planned):
            click.echo(
                f"{len(planned) - len(retried)} of them had been retried by someone else meanwhile."
            )
    if missing:
        raise click.exceptions.Exit(1)


def _show_planned(
    planned: Sequence[Redriven],
    details: Mapping[int, Job | None],
    to_queue: str | None,
    *,
    to_stderr: bool,
    dry_run: bool = False,
) -> None:
    """What a retry will (or, in a dry run, would) do: one line per dead letter."""
    verb = "Would retry" if dry_run else "Will retry"
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
                shorten(compact_json(job.payload), 30) if job else None,
                shorten(_last_error(job.errors), 60) if job else None,
            ]
        )
    headers = ["JOB", "QUEUE", "FAILED (UTC)", "ATTEMPTS", "PAYLOAD", "LAST ERROR"]
    click.echo(_indent(render_table(headers, table, right=["JOB", "ATTEMPTS"])), err=to_stderr)
    if len(planned) > _SHOWN_BEFORE_CONFIRMING:
        click.echo(f"  ... and {len(planned) - _SHOWN_BEFORE_CONFIRMING} more", err=to_stderr)


@dlq.command("purge")
@click.option(
    "--older-than",
    type=DURATION,
    required=True,
    help="Delete the dead letters that failed longer ago than this (30s, 5m, 2h, 7d).",
)
@click.option("--queue", "-q", metavar="QUEUE", help="Only this queue's.")
@yes_option
@_operation
def dlq_purge(
    older_than: timedelta,
    queue: str | None,
    yes: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Delete the dead letters that failed more than --older-than ago, retried or not.

    Retention does this on its own (each queue keeps dead letters 30 days by default); purge
    is for clearing out sooner. Asks first, unless --yes.

    \b
    Example:
      postkit dlq purge --older-than 7d
      postkit dlq purge --older-than 1h --queue send_otp --yes
    """
    cutoff = datetime.now(timezone.utc) - older_than
    with _client(dsn, namespace) as client:
        matching = client.dead_letters(
            queue, limit=10_000, failed_before=cutoff, include_redriven=True
        )
        _rollback(client)
        deleted = 0
        if matching:
            count = f"{len(matching)}+" if len(matching) == 10_000 else str(len(matching))
            where = f" of queue {queue}" if queue else ""
            _confirm(
                f"Delete {count} dead letter(s){where} that failed more than "
                f"{format_duration(older_than)} ago? This cannot be undone.",
                yes,
            )
            deleted = client.purge_dead_letters(older_than=older_than, queue=queue)
            _commit(client)
    if as_json:
        echo_json({"deleted": deleted})
    else:
        click.echo(f"Deleted {plural(deleted, 'dead letter')}.")


# --- queues ----------------------------------------------------------------------------------


@main.group("queue")
def queue_group() -> None:
    """Pause, resume or purge a queue.

    \b
    Example:
      postkit queue pause send_otp
      postkit queue resume send_otp
      postkit queue purge send_otp --yes
    """


@queue_group.command("pause")
@click.argument("queue")
@_operation
def queue_pause(queue: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop handing out the jobs of QUEUE. Pushes are still accepted, running jobs finish.

    \b
    Example:
      postkit queue pause send_otp --namespace my-app
    """
    with _client(dsn, namespace) as client:
        client.pause_queue(queue)
        _commit(client)
    if as_json:
        echo_json({"queue": queue, "paused": True})
    else:
        click.echo(
            f"Paused queue {queue}: workers get none of its jobs until "
            f"`postkit queue resume {queue}{_ns(namespace)}`; pushes are still accepted."
        )


@queue_group.command("resume")
@click.argument("queue")
@_operation
def queue_resume(queue: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Hand out the jobs of QUEUE again.

    \b
    Example:
      postkit queue resume send_otp --namespace my-app
    """
    with _client(dsn, namespace) as client:
        client.resume_queue(queue)
        _commit(client)
    if as_json:
        echo_json({"queue": queue, "paused": False})
    else:
        click.echo(f"Resumed queue {queue}: workers get its jobs again.")


@queue_group.command("purge")
@click.argument("queue")
@yes_option
@_operation
def queue_purge(queue: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Delete every pending and scheduled job of QUEUE. Running jobs are left to their
    workers; dead letters stay (see `postkit dlq purge`). Asks first, unless --yes.

    \b
    Example:
      postkit queue purge send_otp
      postkit queue purge send_otp --yes --json
    """
    with _client(dsn, namespace) as client:
        (row,) = client.stats(queue)
        _rollback(client)
        waiting = row.pending + row.scheduled
        deleted = 0
        if waiting:
            count = f"{waiting}+" if row.counts_capped else str(waiting)
            _confirm(
                f"Delete {count} pending and scheduled job(s) of queue {queue}? "
                "This cannot be undone.",
                yes,
            )
            deleted = client.purge_queue(queue)
            _commit(client)
    if as_json:
        echo_json({"queue": queue, "deleted": deleted})
    else:
        click.echo(
            f"Deleted {plural(deleted, 'pending or scheduled job', 'pending and scheduled jobs')}"
            f" of queue {queue}."
        )


# --- schedules -------------------------------------------------------------------------------


@main.group()
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
@click.option("--priority", type=click.IntRange(-32768, 32767), default=0, show_default=True)
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 1000),
    help="Each job's attempts. Default: the queue's setting.",
)
@_operation
def schedule_create(
    name: str,
    queue: str,
    cron: str | None,
    timezone: str | None,
    every: timedelta | None,
    payload: str,
    priority: int,
    max_attempts: int | None,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Create the schedule NAME, or replace the one of that name.

    Give exactly one of --cron (with --timezone, so "0 9 * * *" stays at 9 am across
    daylight-saving changes) and --every.

    \b
    Example:
      postkit schedule create nightly-report --queue reports --cron "0 3 * * *" \\
          --timezone Europe/Paris
      postkit schedule create heartbeat --queue pings --every 5m --payload '{"ping": true}'
    """
    if (cron is None) == (every is None):
        raise click.UsageError("give exactly one of --cron and --every")
    if timezone is not None and cron is None:
        raise click.UsageError("--timezone applies to --cron schedules only")
    try:
        value = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not valid JSON: {exc}", param_hint="'--payload'") from None
    with _client(dsn, namespace) as client:
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
        _commit(client)
    if as_json:
        echo_json(saved)
        return
    click.echo(
        f"{'Replaced' if existed else 'Created'} schedule {saved.name}: pushes "
        f"{compact_json(saved.payload)} to {saved.queue}, {_when(saved)}; next run "
        f"{format_time(saved.next_run_at)} UTC."
    )


@schedule.command("list")
@_operation
def schedule_list(namespace: str, dsn: str | None, as_json: bool) -> None:
    """Every schedule of the namespace, by name.

    \b
    Example:
      postkit schedule list --namespace my-app
    """
    with _client(dsn, namespace) as client:
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
            "paused" if row.paused else "active",
            format_time(row.next_run_at),
            format_time(row.last_run_at),
            row.last_job_id,
            shorten(compact_json(row.payload), 30),
        ]
        for row in rows
    ]
    click.echo(render_table(headers, table, right=["LAST JOB"]))


def _no_such_schedule(name: str, namespace: str) -> click.ClickException:
    return click.ClickException(
        f"no schedule named {name!r} in namespace {namespace!r} "
        f"(see `postkit schedule list{_ns(namespace)}`)"
    )


@schedule.command("pause")
@click.argument("name")
@_operation
def schedule_pause(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop firing the schedule NAME.

    \b
    Example:
      postkit schedule pause nightly-report
    """
    with _client(dsn, namespace) as client:
        if not client.pause_schedule(name):
            raise _no_such_schedule(name, namespace)
        _commit(client)
    if as_json:
        echo_json({"name": name, "paused": True})
    else:
        click.echo(f"Paused schedule {name}.")


@schedule.command("resume")
@click.argument("name")
@_operation
def schedule_resume(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Fire the schedule NAME again; once at the next tick if a run fell due while paused.

    \b
    Example:
      postkit schedule resume nightly-report
    """
    with _client(dsn, namespace) as client:
        if not client.resume_schedule(name):
            raise _no_such_schedule(name, namespace)
        _commit(client)
    if as_json:
        echo_json({"name": name, "paused": False})
    else:
        click.echo(f"Resumed schedule {name}.")


@schedule.command("delete")
@click.argument("name")
@yes_option
@_operation
def schedule_delete(name: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Delete the schedule NAME. The jobs it already pushed stay. Asks first, unless --yes.

    \b
    Example:
      postkit schedule delete nightly-report --yes
    """
    with _client(dsn, namespace) as client:
        if not any(row.name == name for row in client.schedules()):
            raise _no_such_schedule(name, namespace)
        _rollback(client)
        _confirm(f"Delete schedule {name}?", yes)
        if not client.delete_schedule(name):
            raise _no_such_schedule(name, namespace)
        _commit(client)
    if as_json:
        echo_json({"name": name, "deleted": True})
    else:
        click.echo(f"Deleted schedule {name}.")


# --- the ticker ------------------------------------------------------------------------------

_TICK_LIMIT = 1000


@dataclasses.dataclass(frozen=True)
class TickRound:
    """What one round of `postkit tick` did."""

    at: datetime
    reclaimed: int
    fired: list[Fired]
    pruned: Pruned

    @property
    def busy(self) -> bool:
        return bool(self.reclaimed or self.fired or self.pruned.completed_jobs)

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


def tick_round(client: QueueClient) -> TickRound:
    """Reclaim expired claims, fire due schedules, apply retention: each step committed."""
    reclaimed = client.tick_timeouts(limit=_TICK_LIMIT)
    _commit(client)
    fired = client.tick_schedules()
    _commit(client)
    pruned = client.prune(limit=_TICK_LIMIT)
    _commit(client)
    return TickRound(datetime.now(timezone.utc), reclaimed, fired, pruned)


def _until_next_schedule(connection: psycopg.Connection[Any], namespace: str) -> float:
    """Seconds until the namespace's next active schedule falls due (a little more than 0
    when one is due now, and never more than a day): the ticker wakes for it."""
    from postkit.queue import protocol
    from postkit.queue.rows import as_dicts

    call = protocol.next_schedule_at(namespace)
    cursor = connection.execute(call.sql, call.params)
    due = call.parse(as_dicts(cursor.description, cursor.fetchall()))
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
    if result.pruned.completed_jobs or result.pruned.dead_letters:
        click.echo(
            f"{stamp}  retention deleted {plural(result.pruned.completed_jobs, 'archived job')}"
            f" and {plural(result.pruned.dead_letters, 'dead letter')}"
        )
    if not result.anything and not quiet_if_idle:
        click.echo(f"{stamp}  nothing to do: no expired claims, no due schedules, nothing to prune")


@main.command()
@click.option("--once", is_flag=True, help="Do one round and exit.")
@click.option(
    "--interval",
    type=SECONDS,
    default=5.0,
    show_default=True,
    help="Mean seconds between rounds (each is jittered by up to a quarter, so many tickers "
    "spread out). Also 5s, 1m.",
)
@_operation
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
        with _client(resolved, namespace) as client:
            result = tick_round(client)
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
                result = tick_round(QueueClient(connection.cursor(), namespace=namespace))
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
                        _until_next_schedule(connection, namespace),
                    )
                )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if connection is not None:
            connection.close()
    click.echo("Stopped.", err=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
