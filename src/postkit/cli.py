"""The ``postkit`` command line.

Every command that talks to a database takes ``--dsn``; without it, ``POSTKIT_DSN`` or
``DATABASE_URL`` is used, and without those an embedded PostgreSQL is started (see
:mod:`postkit.embedded`). Errors end with one ``Error:`` line (click adds its usage hint above
a usage mistake) and never show a traceback; the exit code is 2 for a bad argument, 1 otherwise.

Besides install, sql, demo and worker, the operating commands (stats, jobs, push, cancel, dlq,
queue, schedule, tick) each take ``--namespace`` and ``--json``; those that delete or retry ask
first unless ``--yes``. A queue name the namespace has never seen is refused with the known
queues (see :func:`require_known_queue`), unless ``--create`` accepts it where a command may
start a queue. Their table and argument helpers live in :mod:`postkit.cli_format`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, TypeVar

import click
import psycopg

from postkit import __version__
from postkit.cli_format import (
    DURATION,
    JOB_ID,
    RESET,
    SECONDS,
    TIME,
    Ago,
    OrDefault,
    compact_json,
    echo_json,
    first_line,
    format_duration,
    format_time,
    mask_password,
    plural,
    printable,
    render_fields,
    render_table,
    shorten,
    to_jsonable,
)
from postkit.embedded import resolve_dsn
from postkit.errors import PostkitError, ValidationError
from postkit.queue import (
    DeadLetter,
    Job,
    QueueClient,
    QueuePolicy,
    install_script,
    installed_version,
    latest_version,
    limits,
)
from postkit.queue import install as install_queue
from postkit.queue.admin import (
    ACCESS_KINDS,
    Access,
    assign_namespace,
    enable_tenant_isolation,
    grant_access,
    revoke_access,
)
from postkit.queue.job import (
    BrokenSchedule,
    Fired,
    Outcomes,
    Pruned,
    QueueStats,
    Redriven,
    Schedule,
)
from postkit.queue.protocol import JOB_STATES as _JOB_STATES
from postkit.queue.protocol import new_schedule as check_schedule

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


_NAMESPACE_HELP = "The application's namespace; a command sees and changes only its own jobs."


def namespace_option(command: F) -> F:
    return click.option(
        "--namespace", default="default", show_default=True, metavar="NAME", help=_NAMESPACE_HELP
    )(command)


class _BadValue(click.ClickException):
    """A value the SDK or the SQL module refused (a ValidationError): a bad argument, exit code
    2 as for click's own, but one `Error:` line without the usage hint."""

    exit_code = 2


class _FriendlyGroup(click.Group):
    """Turns Postkit and database errors into one readable line: exit code 2 for a value the
    SDK or the SQL module refused (a ValidationError, a bad argument), 1 for the others."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValidationError as exc:
            raise _BadValue(_one_line(exc)) from exc
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


def bounded(bounds: limits.Bounds) -> click.IntRange:
    """An integer option with the SQL module's own bounds (postkit.queue.limits)."""
    return click.IntRange(bounds.low, bounds.high)


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
      postkit stats                  every queue at a glance (--watch: live, with rates)
      postkit jobs send_otp          a queue's jobs, a page at a time
      postkit push send_otp '{}'     push a job (and postkit cancel JOB_ID)
      postkit dlq list               the dead-letter queue (and dlq show, retry, purge)
      postkit queue pause send_otp   stop handing out a queue's jobs (and resume, configure,
                                     purge)
      postkit schedule list          recurring jobs (and schedule create, pause, resume,
                                     delete)
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
    "(also pull, settle and tick; the default) or operator (also inspect and steer). The role "
    "gets EXECUTE on those functions and nothing on the tables. Repeatable.",
)
@click.option(
    "--revoke",
    "revokes",
    multiple=True,
    metavar="ROLE",
    help="Take every Postkit privilege from ROLE. Repeatable.",
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
    revokes: tuple[str, ...],
    tenant_isolation: bool,
    assignments: tuple[str, ...],
) -> None:
    """Install the queue schema (postkit_queue), or upgrade it in place.

    Idempotent: each migration is applied once and recorded in
    postkit_queue.migrations; a second run changes nothing.

    \b
    A role layout (create the roles first; run this as a superuser or the schema's owner;
    what each kind may do: docs/guarantees.md, "Roles"):
      postkit install --grant shop_web:producer --grant shop_worker:worker \\
                      --grant shop_ops:operator
      postkit install --tenant-isolation --assign shop=shop_web --assign shop=shop_worker
    """
    role_grants = [_role_access(value) for value in grants]
    namespace_roles = [_namespace_role(value) for value in assignments]
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        result = install_queue(connection)
        with connection.transaction(), connection.cursor() as cursor:
            for role in revokes:
                revoke_access(cursor, role)
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
                    "revoked": list(revokes),
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
        if result.previous_version == 0:
            click.echo(
                f"postkit_queue installed at version {result.version} (migrations {applied})"
            )
        else:
            click.echo(
                f"postkit_queue upgraded from version {result.previous_version} to "
                f"{result.version} (applied migrations {applied})"
            )
    else:
        click.echo(f"postkit_queue is up to date at version {result.version}")
    for role in revokes:
        click.echo(f"revoked every Postkit privilege from {role}")
    for role, access in role_grants:
        click.echo(f"granted {access} access to {role}")
    for namespace, role in namespace_roles:
        click.echo(f"assigned namespace {namespace} to {role}")
    if tenant_isolation:
        click.echo("tenant isolation is on: each role sees only its own namespaces")


@main.command()
@click.option(
    "--no-transaction",
    is_flag=True,
    help="Leave out BEGIN/COMMIT, to embed the script in your own migration.",
)
def sql(no_transaction: bool) -> None:
    """Print the queue's install script: plain SQL, idempotent, upgrades in place.

    \b
    Example:
      postkit sql | psql -v ON_ERROR_STOP=1 "$DATABASE_URL"
    """
    click.echo(install_script(transaction=not no_transaction), nl=False)


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
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise click.ClickException(_import_failure(module_name, exc)) from None
        hint = ""
        if module_name.endswith(".py"):
            hint = f"; name the module, not the file: {module_name[:-3].replace('/', '.')}"
        raise click.ClickException(
            f"cannot import {module_name}: no module named {exc.name!r} in the current "
            f"directory or on sys.path{hint}"
        ) from None
    except Exception as exc:  # the module's own code failed: a SyntaxError, a missing name...
        raise click.ClickException(_import_failure(module_name, exc)) from None
    if attribute:
        if not hasattr(module, attribute):
            raise click.ClickException(f"{module_name} has no attribute {attribute!r}")
        value = getattr(module, attribute)
        if not isinstance(value, Handlers):
            raise click.ClickException(
                f"{spec} is not a Handlers object (from postkit.queue.worker import Handlers) "
                f"but of type {type(value).__name__}"
            )
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


def _where(filename: str | None, line: int | None) -> str:
    """``tasks.py, line 3``: a file relative to the current directory when under it."""
    path = filename or "?"
    with contextlib.suppress(ValueError):
        relative = os.path.relpath(path)
        if not relative.startswith(os.pardir):
            path = relative
    return f"{path}, line {line}" if line else path


def _import_failure(module_name: str, exc: Exception) -> str:
    """Why importing the user's module failed, in one line: the module, the file and line, and
    the cause (the exception's type and message), without the traceback through click."""
    if isinstance(exc, SyntaxError):
        where = _where(exc.filename, exc.lineno)
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        return f"cannot import {module_name}: {type(exc).__name__}: {exc.msg} ({where}{text})"
    machinery = (__file__, os.path.dirname(importlib.__file__ or "") + os.sep)
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not frame.filename.startswith(("<frozen ", *machinery))
    ]
    where = ""
    if frames:
        where = f" ({_where(frames[0].filename, frames[0].lineno)}"
        if len(frames) > 1:
            where += f", raised in {_where(frames[-1].filename, frames[-1].lineno)}"
        where += ")"
    hint = ""
    if isinstance(exc, ModuleNotFoundError):
        hint = f"; is it installed for this Python ({sys.executable})?"
    cause = first_line(str(exc)) or "(no message)"
    return f"cannot import {module_name}: {type(exc).__name__}: {cause}{where}{hint}"


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


def _log_start(
    namespace: str, queues: Sequence[str], concurrency: int, processes: int, dsn: str
) -> None:
    """The worker's one line at start, shown without -v: what it works and where (the DSN
    without its password)."""
    import logging

    from postkit.logs import REPORT_LOGGER

    shown = mask_password(dsn)
    logging.getLogger(REPORT_LOGGER).info(
        "worker started: namespace %r, queues %s, concurrency %d, %s, database %s",
        namespace,
        ", ".join(queues),
        concurrency,
        plural(processes, "process", "processes"),
        shown,
        extra={
            "event": "start",
            "namespace": namespace,
            "queues": list(queues),
            "concurrency": concurrency,
            "processes": processes,
            "dsn": shown,
        },
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
@namespace_option
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
    if not supervised:
        _log_start(namespace, queues or tuple(handlers), concurrency, processes, resolved)

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
        report(runner.stats)  # the attempts settled since the last line


# -------------------------------------------------------------------------------------------
# Operating the queue: stats, jobs, dead letters, queues, schedules, the ticker.
#
# Every command opens its own connection and commits after each write: the CLI owns its
# transaction, unlike the SDK, which writes in its caller's.
# -------------------------------------------------------------------------------------------

_SHOWN_BEFORE_CONFIRMING = 20
"""Dead letters listed before a retry's confirmation; the rest are counted."""
_STATS_CAP = 100_000
"""Where stats stops counting (see QueueClient.stats)."""
_KNOWN_SHOWN = 10
"""Known queues named in an unknown queue's error; the rest are counted."""


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


def create_option(command: F) -> F:
    return click.option(
        "--create",
        is_flag=True,
        help="Accept a queue name the namespace has not seen yet (a typo guard otherwise).",
    )(command)


def known_queues(client: QueueClient) -> list[str]:
    """The queues the namespace has used, by name (QueueClient.known_queues): with jobs, dead
    letters, settings or outcomes in the last hour, served by a worker, or pushed to by a
    schedule."""
    return client.known_queues()


def require_known_queue(
    client: QueueClient, queue: str | None, *, option: str = "", create: bool | None = None
) -> None:
    """Refuse, in one line, a queue name the namespace has never seen (a typo, most often),
    with a did-you-mean hint and the known queues. ``create`` is None for a command that only
    reads (a new name has nothing to show), else whether --create was given.

    The check is the command line's: the SQL functions and the SDK accept any name.
    """
    if queue is None or create or not queue.strip():
        return  # a blank name is the SQL module's to refuse, with its own message
    known = known_queues(client)
    if queue in known:
        return
    label = f"{option} {queue!r}" if option else f"queue {queue!r}"
    message = (
        f"{label} is unknown in namespace {client.namespace!r} (no jobs, dead letters, "
        "settings, schedule or worker, and no outcomes in the last hour)."
    )
    close = difflib.get_close_matches(queue, known, n=1, cutoff=0.6)
    if close:
        message += f" Did you mean {close[0]!r}?"
    if known:
        more = f" and {len(known) - _KNOWN_SHOWN} more" if len(known) > _KNOWN_SHOWN else ""
        message += f" Known queues: {', '.join(known[:_KNOWN_SHOWN])}{more}."
    else:
        message += " The namespace has no queues yet."
    if create is not None:
        message += " Pass --create to use a new queue name."
    raise click.ClickException(message)


def _payload_text(payload: Any, payload_error: str | None) -> str:
    """A payload for a table: its JSON, or why Python could not decode it."""
    return f"({payload_error})" if payload_error is not None else compact_json(payload)


def _moments(client: QueueClient, *moments: datetime | Ago | None) -> tuple[datetime | None, ...]:
    """``--since``/``--until`` values as times: a duration ago by the queue's clock (read once,
    so that both are measured from the same now), an ISO time as it is."""
    now: datetime | None = None
    resolved: list[datetime | None] = []
    for moment in moments:
        if isinstance(moment, Ago):
            now = now or client.clock()
            resolved.append(moment.before(now))
        else:
            resolved.append(moment)
    return tuple(resolved)


def _last_error(errors_: Sequence[Mapping[str, Any]]) -> str:
    return first_line(str(errors_[-1].get("error") or "")) if errors_ else ""


@main.command()
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
@_operation
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
    are not counted). OLDEST is how long the oldest ready job has waited. The last hour's
    outcomes: DONE acked, FAILED dead-lettered, RETRIED nacked, RESCUED reclaimed by
    tick_timeouts; ATTEMPTS is the mean attempts of the jobs done. Counts stop at 100,000
    (shown as 100000+), so stats stays fast on any backlog.

    --watch redraws the table in place every --interval seconds, with DONE/S and FAILED/S:
    the jobs acked and dead-lettered per second since the previous redraw. With --json it
    prints one JSON object per redraw instead (a line each: at, seconds since the previous
    one, and each queue's stats with completed_per_second and failed_per_second).

    \b
    Example:
      postkit stats --namespace my-app
      postkit stats --queue send_otp --json
      postkit stats --watch --interval 5
    """
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, option="--queue")
        if watch:
            _watch_stats(client, queue, interval=interval, iterations=iterations, as_json=as_json)
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
    """The stats table; with ``rates`` (per queue: done and failed per second, as --watch
    computes them; empty on its first redraw), their two columns after STATE."""

    def count(row: QueueStats, value: int) -> str:
        return f"{value}+" if row.counts_capped and value >= _STATS_CAP else str(value)

    def rate(row: QueueStats, which: int) -> str:
        return f"{rates[row.queue][which]:.1f}" if rates and row.queue in rates else "-"

    watching = rates is not None
    headers = ["QUEUE", "STATE", *(["DONE/S", "FAILED/S"] if watching else [])]
    headers += ["PENDING", "SCHEDULED", "RUNNING", "DEAD", "OLDEST"]
    headers += ["DONE 1H", "FAILED 1H", "RETRIED 1H", "RESCUED 1H", "ATTEMPTS"]
    table = [
        [
            row.queue,
            "paused" if row.paused else "active",
            *([rate(row, 0), rate(row, 1)] if watching else []),
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
    return render_table(headers, table, right=headers[2:])


_CLEAR_SCREEN = "\x1b[H\x1b[2J"
"""ANSI: cursor home, then clear the screen; each --watch frame is drawn from the top."""
_REBASE_AFTER = timedelta(minutes=50)
"""--watch counts outcomes from a fixed minute (see QueueClient.outcomes_since), moved up
before the counters of that minute are pruned (after 2 hours)."""


def _watch_stats(
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
                    done = (current.completed if current else 0) - (
                        before.completed if before else 0
                    )
                    failed = (current.failed if current else 0) - (before.failed if before else 0)
                    rates[row.queue] = (max(done, 0) / seconds, max(failed, 0) / seconds)
            if datetime.now(timezone.utc) - since > _REBASE_AFTER:
                since = datetime.now(timezone.utc) - timedelta(minutes=5)
                totals = {o.queue: o for o in client.outcomes_since(since)}
            _rollback(client)  # read-only: hold no snapshot between redraws
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
                            "failed_per_second": rates[row.queue][1] if rates else None,
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
        with contextlib.suppress(psycopg.Error):
            _rollback(client)  # Ctrl-C may have cancelled a query halfway
        click.echo("Stopped.", err=True)


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
    type=bounded(limits.LIMITS["jobs"]),
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
        require_known_queue(client, queue)
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
            shorten(_payload_text(job.payload, job.payload_error), 40),
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


# --- pushing and cancelling jobs ------------------------------------------------------------


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


@main.command()
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
@create_option
@_operation
def push(
    queue: str,
    payload: str,
    delay: float | None,
    priority: int,
    unique_key: str | None,
    max_attempts: int | None,
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
    """
    value = _payload_argument(payload)
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, create=create)
        job_id = client.push(
            queue,
            value,
            delay=delay,
            priority=priority,
            max_attempts=max_attempts,
            unique_key=unique_key,
        )
        job = None if job_id is None else client.get_job(job_id)
        _commit(client)
    if as_json:
        echo_json(
            {
                "id": job_id,
                "queue": queue,
                "run_at": None if job is None else job.run_at,
                "deduplicated": job_id is None,
            }
        )
    elif job_id is None:
        click.echo(
            f"Not pushed: a job with unique key {unique_key!r} is already pending or running in "
            f"queue {queue}."
        )
    else:
        # Ready or due: whether a worker takes it then depends on workers and on the queue
        # being paused, which a producer's role cannot read.
        when = (
            "is ready now"
            if delay is None or job is None
            else f"is due at {format_time(job.run_at)} UTC"
        )
        click.echo(f"Pushed job {job_id} to queue {queue}; it {when}.")


@main.command()
@click.argument("job_id", type=JOB_ID)
@yes_option
@_operation
def cancel(job_id: int, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Cancel the pending or scheduled job JOB_ID: delete it before any worker runs it.

    A running job cannot be cancelled (its worker holds the claim), and a dead letter is no
    longer a live job (retry it with `postkit dlq retry`, or leave it to retention). Shows the
    job and asks first, unless --yes.

    \b
    Example:
      postkit cancel 42
      postkit cancel 42 --yes --json
    """
    with _client(dsn, namespace) as client:
        job = client.get_job(job_id)
        _rollback(client)
        if job is None:
            raise click.ClickException(
                f"no job {job_id} in namespace {namespace!r}: never pushed, in another "
                "namespace, or completed (acknowledged jobs leave the queue)"
            )
        if job.state == "dead":
            raise click.ClickException(
                f"job {job_id} is a dead letter of queue {job.queue!r}, not a live job: nothing "
                f"to cancel (see `postkit dlq show {job_id}{_ns(namespace)}`)"
            )
        if job.state == "running":
            raise click.ClickException(
                f"job {job_id} is running (claimed by {job.worker_id or 'a worker'}) and cannot "
                "be cancelled: its worker settles it, or tick_timeouts reclaims it when its "
                "claim expires"
            )
        waits = job.run_at is not None and job.run_at > datetime.now(timezone.utc)
        when = f"{'runs at' if waits else 'ready since'} {format_time(job.run_at)} UTC"
        _confirm(
            f"Cancel job {job_id} of queue {job.queue} (payload "
            f"{shorten(compact_json(job.payload), 40)}, {when})? It is deleted and never runs.",
            yes,
        )
        if not client.cancel(job_id):
            raise click.ClickException(
                f"job {job_id} is gone: it was completed or cancelled meanwhile"
            )
        _commit(client)
    if as_json:
        echo_json({"id": job_id, "queue": job.queue, "cancelled": True})
    else:
        click.echo(f"Cancelled job {job_id} of queue {job.queue}.")


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
    type=bounded(limits.LIMITS["dead_letters"]),
    default=50,
    show_default=True,
    help="At most.",
)
@_operation
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
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, option="--queue")
        failed_after, failed_before = _moments(client, since, until)
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
            shorten(_payload_text(dead.payload, dead.payload_error), 30),
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
        ("payload", _payload_text(job.payload, job.payload_error)),
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
                click.echo(f"      {printable(extra)}".rstrip())


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


@dlq.command("retry")
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
    help="Retry at most this many.",
)
@click.option("--dry-run", is_flag=True, help="Only show what would be retried.")
@yes_option
@_operation
def dlq_retry(
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
      postkit dlq retry --queue send_otp --to-queue send_otp_slow --create --all --yes
    """
    filters = (queue, error_contains, since, until)
    if not job_ids and not every and all(value is None for value in filters):
        raise click.UsageError(
            "say which dead letters to retry: JOB_IDs, or --queue, --error, --since, --until, "
            "or --all for every one"
        )
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, option="--queue")
        require_known_queue(client, to_queue, option="--to-queue", create=create)
        failed_after, failed_before = _moments(client, since, until)
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
        _rollback(client)  # the dry run locked what it looked at; nothing changed
        found = {row.job_id for row in planned}
        missing = [job_id for job_id in dict.fromkeys(job_ids) if job_id not in found]
        matching = "" if all(value is None for value in filters) else " matching the filters"
        why_missing = [_why_not_retried(client, job_id, matching) for job_id in missing]
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
        elif not missing:
            click.echo("No dead letters match; nothing would be retried.")
    elif not planned:
        if not missing:
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
        raise click.ClickException("; ".join(why_missing))


def _why_not_retried(client: QueueClient, job_id: int, matching: str) -> str:
    """Why a JOB_ID given to `dlq retry` is not to be retried: it was already (as which job),
    or it is no dead letter (matching the filters) of the namespace."""
    job = client.get_job(job_id)
    dead = None if job is None or job.state != "dead" else _find_dead_letter(client, job)
    _rollback(client)
    if dead is not None and dead.redriven_job_id is not None:
        return f"job {job_id} was already retried as job {dead.redriven_job_id}"
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
                shorten(_payload_text(job.payload, job.payload_error), 30) if job else None,
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
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, option="--queue")
        # One cutoff, by the queue's clock, for the count shown and for the delete: neither
        # the client's clock nor the time spent answering the prompt changes what goes.
        cutoff = client.clock() - older_than
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
            deleted = client.purge_dead_letters(failed_before=cutoff, queue=queue)
            _commit(client)
    if as_json:
        echo_json({"deleted": deleted})
    else:
        click.echo(f"Deleted {plural(deleted, 'dead letter')}.")


# --- queues ----------------------------------------------------------------------------------


@main.group("queue")
def queue_group() -> None:
    """Pause, resume, configure or purge a queue.

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
    """


def _is_paused(client: QueueClient, queue: str) -> bool:
    (row,) = client.stats(queue, cap=1)
    return row.paused


@queue_group.command("pause")
@click.argument("queue")
@create_option
@_operation
def queue_pause(queue: str, create: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop handing out the jobs of QUEUE. Pushes are still accepted, running jobs finish.
    Pausing a queue that is already paused changes nothing (and says so).

    \b
    Example:
      postkit queue pause send_otp --namespace my-app
      postkit queue pause reports --create     a queue that has no jobs yet
    """
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, create=create)
        changed = not _is_paused(client, queue)
        if changed:
            client.pause_queue(queue)
        _commit(client)
    if as_json:
        echo_json({"queue": queue, "paused": True, "changed": changed})
    elif changed:
        click.echo(
            f"Paused queue {queue}: workers get none of its jobs until "
            f"`postkit queue resume {queue}{_ns(namespace)}`; pushes are still accepted."
        )
    else:
        click.echo(f"Queue {queue} is already paused; nothing changed.")


@queue_group.command("resume")
@click.argument("queue")
@_operation
def queue_resume(queue: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Hand out the jobs of QUEUE again. Resuming a queue that is not paused changes nothing
    (and says so; the exit code is 0 either way).

    \b
    Example:
      postkit queue resume send_otp --namespace my-app
    """
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue)
        changed = _is_paused(client, queue)
        if changed:
            client.resume_queue(queue)
        _commit(client)
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
        ("max payload", f"{policy.max_payload_bytes:,} bytes"),
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
@create_option
@_operation
def queue_configure(
    queue: str,
    max_attempts: int | str | None,
    visibility_timeout: float | str | None,
    backoff_base: float | str | None,
    backoff_cap: float | str | None,
    max_payload_bytes: int | str | None,
    retain_completed: timedelta | str | None,
    retain_dead: timedelta | str | None,
    create: bool,
    namespace: str,
    dsn: str | None,
    as_json: bool,
) -> None:
    """Change the settings of QUEUE: the defaults its jobs get when a push or pull does not
    say otherwise, and how long its finished jobs are kept. Settings not given keep their
    value; a value of `default` restores the built-in one. Prints the settings now in force.

    \b
    Example:
      postkit queue configure send_otp --max-attempts 5 --backoff-base 2s --backoff-cap 10m
      postkit queue configure send_otp --retain-dead 7d --retain-completed 1h
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
    }
    if all(value is None for value in given.values()):
        raise click.UsageError(
            "give at least one setting to change, e.g. --max-attempts 5 (see --help)"
        )
    reset = [name for name, value in given.items() if value == RESET]
    values = {name: None if value == RESET else value for name, value in given.items()}
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue, create=create)
        policy = client.update_queue_settings(queue, **values, reset=reset)
        _commit(client)
    if as_json:
        echo_json({"queue": queue, **to_jsonable(policy)})
        return
    click.echo(f"Configured queue {queue}:")
    click.echo(render_fields(_describe_policy(policy)))


@queue_group.command("purge")
@click.argument("queue")
@yes_option
@_operation
def queue_purge(queue: str, yes: bool, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Delete every pending and scheduled job of QUEUE. Running jobs are left to their
    workers; dead letters stay (see `postkit dlq purge`). Asks first, unless --yes; a job
    pushed while the question waits is not deleted.

    \b
    Example:
      postkit queue purge send_otp
      postkit queue purge send_otp --yes --json
    """
    with _client(dsn, namespace) as client:
        require_known_queue(client, queue)
        # One cutoff, by the queue's clock, for the count shown and for the delete: a job
        # pushed while the prompt waits is not one the operator agreed to delete.
        cutoff = client.clock()
        waiting = client.purge_queue(queue, created_before=cutoff, dry_run=True)
        _rollback(client)
        deleted = 0
        if waiting:
            _confirm(
                f"Delete {waiting} pending and scheduled job(s) of queue {queue}? "
                "This cannot be undone.",
                yes,
            )
            deleted = client.purge_queue(queue, created_before=cutoff)
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
    with _client(dsn, namespace) as client:
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
        _commit(client)
    if as_json:
        echo_json(saved)
        return
    click.echo(
        f"{'Replaced' if existed else 'Created'} schedule {saved.name}: pushes "
        f"{_payload_text(saved.payload, saved.payload_error)} to {saved.queue}, "
        f"{_when(saved)}; next run {format_time(saved.next_run_at)} UTC."
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
            _schedule_state(row),
            format_time(row.next_run_at),
            format_time(row.last_run_at),
            row.last_job_id,
            shorten(_payload_text(row.payload, row.payload_error), 30),
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
                f"(postkit schedule create {row.name} ...{_ns(namespace)})."
            )


def _schedule_state(row: Schedule) -> str:
    if row.broken_at is not None:
        return "broken"
    return "paused" if row.paused else "active"


def _no_such_schedule(name: str, namespace: str) -> click.ClickException:
    return click.ClickException(
        f"no schedule named {name!r} in namespace {namespace!r} "
        f"(see `postkit schedule list{_ns(namespace)}`)"
    )


def _schedule_paused(client: QueueClient, name: str) -> bool:
    """Whether the schedule NAME is paused; refuses, in one line, a name the namespace lacks."""
    row = next((row for row in client.schedules() if row.name == name), None)
    if row is None:
        raise _no_such_schedule(name, client.namespace)
    return row.paused


@schedule.command("pause")
@click.argument("name")
@_operation
def schedule_pause(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Stop firing the schedule NAME. Pausing a schedule that is already paused changes
    nothing (and says so).

    \b
    Example:
      postkit schedule pause nightly-report
    """
    with _client(dsn, namespace) as client:
        changed = not _schedule_paused(client, name)
        if changed and not client.pause_schedule(name):
            raise _no_such_schedule(name, namespace)
        _commit(client)
    if as_json:
        echo_json({"name": name, "paused": True, "changed": changed})
    elif changed:
        click.echo(
            f"Paused schedule {name}: it does not fire until "
            f"`postkit schedule resume {name}{_ns(namespace)}`."
        )
    else:
        click.echo(f"Schedule {name} is already paused; nothing changed.")


@schedule.command("resume")
@click.argument("name")
@_operation
def schedule_resume(name: str, namespace: str, dsn: str | None, as_json: bool) -> None:
    """Fire the schedule NAME again; once at the next tick if a run fell due while paused.
    Resuming a schedule that is not paused changes nothing (and says so; the exit code is 0
    either way).

    \b
    Example:
      postkit schedule resume nightly-report
    """
    with _client(dsn, namespace) as client:
        changed = _schedule_paused(client, name)
        if changed and not client.resume_schedule(name):
            raise _no_such_schedule(name, namespace)
        _commit(client)
    if as_json:
        echo_json({"name": name, "paused": False, "changed": changed})
    elif changed:
        click.echo(f"Resumed schedule {name}: it fires again.")
    else:
        click.echo(f"Schedule {name} is not paused; nothing changed (it already fires).")


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


def tick_round(client: QueueClient) -> TickRound:
    """Reclaim expired claims, fire due schedules, apply retention: each step committed."""
    reclaimed = client.tick_timeouts(limit=_TICK_LIMIT)
    _commit(client)
    schedules = client.tick_schedules()
    _commit(client)
    pruned = client.prune(limit=_TICK_LIMIT)
    _commit(client)
    fired = [outcome for outcome in schedules if isinstance(outcome, Fired)]
    broken = [outcome for outcome in schedules if isinstance(outcome, BrokenSchedule)]
    return TickRound(datetime.now(timezone.utc), reclaimed, fired, broken, pruned)


def _until_next_schedule(client: QueueClient) -> float:
    """Seconds until the namespace's next active schedule falls due (a little more than 0
    when one is due now, and never more than a day): the ticker wakes for it."""
    due = client.next_schedule_at()
    _rollback(client)
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
                client = QueueClient(connection.cursor(), namespace=namespace)
                result = tick_round(client)
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
                        _until_next_schedule(client),
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
