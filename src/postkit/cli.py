"""The ``postkit`` command line.

Every command that talks to a database takes ``--dsn``; without it, ``POSTKIT_DSN`` or
``DATABASE_URL`` is used, and without those an embedded PostgreSQL is started (see
:mod:`postkit.embedded`). Errors print one line and exit non-zero; they never show a traceback.
"""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
import psycopg

from postkit import __version__
from postkit.embedded import resolve_dsn
from postkit.errors import PostkitError
from postkit.queue import install as install_queue
from postkit.queue import install_script, installed_version, latest_version

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
    """Turns Postkit and connection errors into one readable line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PostkitError, psycopg.OperationalError) as exc:
            raise click.ClickException(str(exc).strip()) from exc


@click.group(cls=_FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="postkit")
def main() -> None:
    """Postkit: a job queue that lives inside PostgreSQL.

    \b
    Quick start:
      postkit demo                 the article's story, end to end
      postkit install              install or upgrade the queue schema
      postkit sql | psql "$DSN"    the same, without Python on the database host
      postkit worker tasks         run the job handlers defined in tasks.py
    """


@main.command()
@dsn_option
@json_option
def install(dsn: str | None, as_json: bool) -> None:
    """Install the queue schema (postkit_queue), or upgrade it in place.

    Idempotent: each migration is applied once and recorded in
    postkit_queue.migrations; a second run changes nothing.
    """
    with psycopg.connect(resolve_dsn(dsn)) as connection:
        result = install_queue(connection)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "previous_version": result.previous_version,
                    "version": result.version,
                    "applied": list(result.applied),
                }
            )
        )
    elif result.applied:
        applied = ", ".join(str(version) for version in result.applied)
        click.echo(
            f"postkit_queue upgraded from version {result.previous_version} to "
            f"{result.version} (applied migrations {applied})"
        )
    else:
        click.echo(f"postkit_queue is up to date at version {result.version}")


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

SIGTERM or Ctrl-C stops claiming; running jobs get --grace-period seconds to finish, then the
rest are released to run elsewhere. A second signal exits at once. With --processes N, a
supervisor runs N worker processes, restarts any that dies, and passes signals on.
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
    default=30.0,
    show_default=True,
    help="Seconds a claim lasts between heartbeats; a dead worker's jobs return after it.",
)
@click.option(
    "--grace-period",
    type=click.FloatRange(0),
    default=30.0,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM before they are released.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0, min_open=True),
    default=5.0,
    show_default=True,
    help="Longest wait between pulls when no notification arrives.",
)
@click.option(
    "--report-interval",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="Seconds between throughput lines; 0 turns them off.",
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
    processes: int,
    namespace: str,
    worker_id: str | None,
    visibility_timeout: float,
    grace_period: float,
    poll_interval: float,
    report_interval: float,
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
            *("--visibility-timeout", str(visibility_timeout)),
            *("--grace-period", str(grace_period), "--poll-interval", str(poll_interval)),
            *("--report-interval", str(report_interval), "--log-format", log_format),
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
        visibility_timeout=visibility_timeout,
        poll_interval=poll_interval,
        grace_period=grace_period,
        report_interval=report_interval or None,
        report=report,
    )
    report.worker_id = runner.worker_id
    runner.run()
    if report_interval:
        report(runner.stats)  # the jobs settled since the last line


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
