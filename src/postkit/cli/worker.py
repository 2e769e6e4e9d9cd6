"""``postkit worker``: load the user's Handlers and run the worker runtime on them, in this
process or, with ``--processes N``, in N children under a supervisor."""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from postkit.cli.console import require_schema
from postkit.cli.handlers_module import load_handlers
from postkit.cli.options import dsn_option, namespace_option, weight_option
from postkit.cli.output import (
    NamespaceWeight,
    NamespaceWeightType,
    QueueWeight,
    mask_password,
    plural,
)
from postkit.embedded import resolve_dsn
from postkit.worker import defaults

if TYPE_CHECKING:
    from postkit.tasks import App
    from postkit.worker import Handlers

_WORKER_HELP = """Run the job handlers of MODULE: claim jobs, run them, then ack, retry or
dead-letter each one.

MODULE is a dotted module path, importable from the current directory (e.g. tasks, or
myapp.tasks), that defines one Handlers instance or one tasks App (postkit.tasks.App); when it
defines several, name one as module:attribute. The worker serves every queue the Handlers (or
the App's tasks) registers, or the --queue ones. An App's worker works in the App's namespace
and, as it starts, writes its tasks' queue policies (max attempts, backoff, visibility
timeout), and logs them.

\b
Example: tasks.py
  from postkit.errors import PermanentError, RetryLater
  from postkit.worker import Handlers
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
  postkit worker tasks --metrics-port 9100   Prometheus metrics on 127.0.0.1:9100
  postkit worker tasks --shared-namespace tenant-a=3 --shared-namespace tenant-b
                                             two namespaces share 8 slots, 6 and 2

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
signals on; if the supervisor is killed (even by SIGKILL), each process stops as on SIGTERM.
"""


def _app_namespace(ctx: click.Context, app: App, namespace: str, name: str) -> str:
    """The namespace a worker of ``app`` works in: the App's, where its tasks push. A
    --namespace naming another is refused; the children under a supervisor get the App's
    namespace on their command line."""
    if _namespace_given(ctx) and namespace != app.namespace:
        raise click.BadParameter(
            f"{name} is an App of namespace {app.namespace!r}, where its tasks push; leave "
            f"--namespace out, or make it {app.namespace!r}",
            param_hint="'--namespace'",
        )
    ctx.params["namespace"] = app.namespace
    return app.namespace


def _log_start(
    namespace: str | Mapping[str, int],
    queues: Sequence[str],
    concurrency: int,
    processes: int,
    dsn: str,
    metrics: str | None,
) -> None:
    """The worker's one line at start, shown without -v: what it works and where (the DSN
    without its password), and where its metrics are served, if they are. ``namespace`` is
    a shared worker's namespaces and their weights."""
    import logging

    from postkit.cli.logs import REPORT_LOGGER

    shown = mask_password(dsn)
    logging.getLogger(REPORT_LOGGER).info(
        "worker started: %s, queues %s, concurrency %d, %s, database %s%s",
        f"namespace {namespace!r}"
        if isinstance(namespace, str)
        else "namespaces "
        + ", ".join(f"{name!r} (weight {weight})" for name, weight in namespace.items()),
        ", ".join(queues),
        concurrency,
        plural(processes, "process", "processes"),
        shown,
        f", metrics on {metrics}" if metrics else "",
        extra={
            "event": "start",
            "namespace" if isinstance(namespace, str) else "namespaces": namespace,
            "queues": list(queues),
            "concurrency": concurrency,
            "processes": processes,
            "dsn": shown,
            **({"metrics": metrics} if metrics else {}),
        },
    )


def _namespace_given(ctx: click.Context) -> bool:
    return ctx.get_parameter_source("namespace") not in (
        click.core.ParameterSource.DEFAULT,
        click.core.ParameterSource.DEFAULT_MAP,
    )


def _check_shared(
    ctx: click.Context,
    shared: Sequence[NamespaceWeight],
    *,
    app: bool,
    prefetch: int | None,
) -> None:
    """Refuse a namespace given twice, and what --shared-namespace cannot go with: --namespace,
    a tasks App (its tasks push in its namespace) and --prefetch (a shared worker holds
    none)."""
    names = [each.namespace for each in shared]
    if twice := sorted({name for name in names if names.count(name) > 1}):
        raise click.BadParameter(
            f"{', '.join(map(repr, twice))} given more than once", param_hint="'--shared-namespace'"
        )
    clash = (
        "--namespace"
        if _namespace_given(ctx)
        else "a tasks App, whose tasks push in its own namespace"
        if app
        else "--prefetch: a shared worker holds no prefetch"
        if prefetch is not None
        else None
    )
    if clash is not None:
        raise click.BadParameter(f"cannot go with {clash}", param_hint="'--shared-namespace'")


def _run_shared(
    dsn: str,
    handlers: Handlers,
    namespaces: dict[str, int],
    *,
    log_start: Callable[[], None],
    **options: Any,
) -> None:
    """Run a shared worker over ``namespaces`` (their weights) until a signal, with a
    throughput line per namespace."""
    from postkit.cli.logs import ThroughputReport
    from postkit.worker import SharedWorker

    reports = {namespace: ThroughputReport(namespace, prefix=True) for namespace in namespaces}
    runner = SharedWorker(
        dsn,
        handlers,
        namespaces=namespaces,
        report=lambda namespace, stats: reports[namespace](stats),
        **options,
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: runner.stop())
    log_start()
    runner.run()
    if options["report_interval"]:
        for namespace, each in runner.workers.items():
            reports[namespace](each.stats)  # the attempts settled since the last line


def _metrics_where(host: str, port: int | None, processes: int) -> str | None:
    """Where the processes serve their metrics: ``http://HOST:PORT/metrics``, or with
    several processes the range of ports, one each (see :func:`child_metrics_port`)."""
    if port is None:
        return None
    shown = f"[{host}]" if ":" in host else host
    ports = str(port) if processes == 1 else f"{port}-{child_metrics_port(port, processes - 1)}"
    return f"http://{shown}:{ports}/metrics"


def child_metrics_port(port: int, index: int) -> int:
    """The metrics port of worker process ``index`` under the supervisor: ``port + index``.

    One endpoint per process rather than prometheus_client's multiprocess mode: each process
    is a scrape target of its own (Prometheus tells them apart by ``instance``), as any
    multi-process server is scraped; nothing is shared (multiprocess mode keeps every
    process's values in files of a shared directory, which the supervisor would have to
    create, clean as children die and restart, and serve itself); and each process keeps the
    live gauges it reads from its own claims at scrape time, which multiprocess mode cannot
    serve. A restarted child serves on its port again, its counters from zero, which
    Prometheus' rate() reads as a counter reset.
    """
    return port + index


def _check_worker_id(worker_id: str, processes: int) -> None:
    """Refuse, before any process starts, a worker id that a process would claim under and
    the SQL module refuses: with --processes N, the longest is ID-(N-1)."""
    from postkit.queue.limits import name_problem

    longest = worker_id if processes == 1 else f"{worker_id}-{processes - 1}"
    problem = name_problem(longest)
    if problem is None:
        return
    if processes == 1:
        raise click.BadParameter(f"the worker id {problem}", param_hint="'--worker-id'")
    raise click.BadParameter(
        f"with --processes {processes} the processes claim as ID-0 to ID-{processes - 1}, and "
        f"{longest!r} {problem}",
        param_hint="'--worker-id'",
    )


_SET_PER_CHILD = frozenset(
    {"processes", "worker_id", "supervised", "no_housekeeping", "dsn", "metrics_port"}
)
"""The worker parameters the supervisor sets for each child itself: one process, a worker id
and a metrics port of its own, housekeeping in the first child only, and the DSN through the
environment, not the command line that `ps` shows."""


def child_arguments(command: click.Command, params: Mapping[str, Any]) -> list[str]:
    """The arguments that give a child ``postkit worker`` the parameters ``params`` (this
    invocation's ``ctx.params``), except those in :data:`_SET_PER_CHILD`.

    Each parameter is written as ``command`` declares it: an argument as its value, a flag
    when set, a repeatable option once per value, another option with ``str(value)``, which
    its type parses back to the same value; an option left unset (None) is left out, so the
    child falls back to the same default.
    """
    arguments: list[str] = []
    for param in command.params:
        value = params.get(param.name or "")
        if param.name in _SET_PER_CHILD or value is None:
            continue
        if not isinstance(param, click.Option):
            arguments.append(str(value))
            continue
        option = next(name for name in param.opts if name.startswith("--"))
        if param.is_flag:
            arguments += [option] if value else []
        else:
            for item in value if param.multiple else (value,):
                arguments += [option, str(item)]
    return arguments


@click.command(help=_WORKER_HELP)
@click.argument("module", metavar="MODULE")
@click.option(
    "-q",
    "--queue",
    "queues",
    multiple=True,
    metavar="QUEUE",
    help="A queue to work; repeat for several. Default: every queue MODULE registers.",
)
@weight_option
@click.option(
    "-c",
    "--concurrency",
    type=click.IntRange(1),
    default=defaults.CONCURRENCY,
    show_default=True,
    help="Jobs run at once, per process.",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0),
    default=None,
    help=(
        "Jobs claimed ahead of free slots, per process [default: adapts: about 0.1 s of the "
        "jobs the process settles, from --concurrency to 500]."
    ),
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
    "--shared-namespace",
    "shared_namespaces",
    multiple=True,
    type=NamespaceWeightType(),
    help="Serve several namespaces from one set of --concurrency slots, shared by weight "
    "(1 to 1000, default 1) while several have jobs; a namespace without jobs leaves its part "
    "to the others. Repeat for each, e.g. --shared-namespace tenant-a=3 --shared-namespace "
    "tenant-b. Instead of --namespace; not with a tasks App or --prefetch.",
)
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
    default=defaults.GRACE_PERIOD,
    show_default=True,
    help="Seconds running jobs get to finish after SIGTERM before they are released.",
)
@click.option(
    "--cancel-grace",
    type=click.FloatRange(0),
    default=defaults.CANCEL_GRACE,
    show_default=True,
    help="Seconds an async handler whose job an operator cancelled gets to return by itself "
    "(is_cancelled() tells it) before it is cancelled with asyncio.CancelledError.",
)
@click.option(
    "--handler-timeout",
    type=click.FloatRange(0),
    default=defaults.HANDLER_TIMEOUT,
    show_default=True,
    help="Seconds a handler may run (unless its registration names a timeout); past it the "
    "attempt counts as timed out and the job is retried. 0: no limit.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(0, min_open=True),
    default=None,
    help="Longest wait between pulls when no notification arrives [default: "
    f"{defaults.POLL_INTERVAL:g}; with --pooler, {defaults.POOLER_POLL_INTERVAL:g}].",
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
    default=defaults.VACUUM_INTERVAL,
    show_default=True,
    help="Seconds between looks at the jobs table's dead rows; past 10,000 the worker vacuums "
    "it, so claims stay fast between autovacuum's visits. 0 leaves it to autovacuum.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    metavar="PORT",
    help="Serve Prometheus metrics on http://HOST:PORT/metrics; with --processes N, process i "
    "serves on PORT+i. Needs prometheus_client: pip install 'postkit-queue[metrics]'.",
)
@click.option(
    "--metrics-host",
    default=defaults.METRICS_HOST,
    show_default=True,
    metavar="HOST",
    help="The address --metrics-port listens on; 0.0.0.0 for every interface.",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="Log every job (claimed, completed, retried...)."
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line, with the event fields.",
)
@click.option("--supervised", is_flag=True, hidden=True)
# A supervisor's children after the first: retention and vacuum are the first one's.
@click.option("--no-housekeeping", "no_housekeeping", is_flag=True, hidden=True)
@dsn_option
@click.pass_context
def worker(
    ctx: click.Context,
    module: str,
    queues: tuple[str, ...],
    weights: tuple[QueueWeight, ...],
    concurrency: int,
    prefetch: int | None,
    processes: int,
    namespace: str,
    shared_namespaces: tuple[NamespaceWeight, ...],
    worker_id: str | None,
    visibility_timeout: float | None,
    grace_period: float,
    cancel_grace: float,
    handler_timeout: float,
    poll_interval: float | None,
    pooler: bool,
    report_interval: float,
    vacuum_interval: float,
    metrics_port: int | None,
    metrics_host: str,
    verbose: bool,
    log_format: str,
    supervised: bool,
    no_housekeeping: bool,
    dsn: str | None,
) -> None:
    from postkit.cli.logs import ThroughputReport, configure_logging
    from postkit.worker import Worker
    from postkit.worker.supervisor import Supervisor, follow_supervisor

    if supervised:
        follow_supervisor()  # die with the supervisor, however it dies
    loaded = load_handlers(module)
    handlers, name = loaded.handlers, loaded.name
    if shared_namespaces:
        _check_shared(ctx, shared_namespaces, app=loaded.app is not None, prefetch=prefetch)
        ctx.params["namespace"] = None  # the children get --shared-namespace alone
    elif loaded.app is not None:
        namespace = _app_namespace(ctx, loaded.app, namespace, name)
    queues = tuple(dict.fromkeys(queues))
    unknown = [queue for queue in queues if queue not in handlers]
    if unweighed := [w.queue for w in weights if w.queue not in (queues or handlers)]:
        raise click.BadParameter(f"no such queue served: {unweighed}", param_hint="'--weight'")
    if unknown:
        raise click.BadParameter(
            f"{name} has no handler for {', '.join(map(repr, unknown))}; "
            f"it registers {', '.join(map(repr, handlers))}",
            param_hint="'--queue'",
        )
    if worker_id is not None:
        _check_worker_id(worker_id, processes)
    if metrics_port is not None:
        from postkit.worker.metrics import require_prometheus_client

        last = child_metrics_port(metrics_port, processes - 1)
        if last > 65535:
            raise click.BadParameter(
                f"{processes} processes serve on ports {metrics_port} to {last}, past 65535",
                param_hint="'--metrics-port'",
            )
        require_prometheus_client()  # before any process starts, not in each child
    configure_logging(verbose, log_format)
    resolved = resolve_dsn(dsn)
    require_schema(resolved)
    if loaded.app is not None and not supervised:
        # Once per `postkit worker`, before any process claims: not once per child.
        loaded.app.configure_queues(resolved, queues=queues or None)

    def log_start() -> None:
        if not supervised:
            _log_start(
                {shared.namespace: shared.weight for shared in shared_namespaces} or namespace,
                queues or tuple(handlers),
                concurrency,
                processes,
                resolved,
                _metrics_where(metrics_host, metrics_port, processes),
            )

    if processes > 1:
        log_start()
        base = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        commands = [
            [
                *(sys.executable, "-m", "postkit.cli", "worker"),
                *child_arguments(ctx.command, ctx.params),
                *("--processes", "1", "--worker-id", f"{base}-{index}", "--supervised"),
                *(("--no-housekeeping",) if index > 0 else ()),
                *(
                    ("--metrics-port", str(child_metrics_port(metrics_port, index)))
                    if metrics_port is not None
                    else ()
                ),
            ]
            for index in range(processes)
        ]
        # The DSN goes through the environment, not the command line that `ps` shows.
        env = {**os.environ, "POSTKIT_DSN": resolved}
        sys.exit(Supervisor(commands, env=env).run())

    if shared_namespaces:
        _run_shared(
            resolved,
            handlers,
            {shared.namespace: shared.weight for shared in shared_namespaces},
            queues={queue: 1 for queue in queues or handlers}
            | {weight.queue: weight.weight for weight in weights},
            worker_id=worker_id,
            concurrency=concurrency,
            visibility_timeout=visibility_timeout,
            poll_interval=poll_interval,
            pooler=pooler,
            grace_period=grace_period,
            cancel_grace=cancel_grace,
            handler_timeout=handler_timeout or None,
            report_interval=report_interval or None,
            vacuum_interval=vacuum_interval or None,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            housekeeping=not no_housekeeping,
            log_start=log_start,
        )
        return
    report = ThroughputReport(prefix=supervised)
    runner = Worker(
        resolved,
        handlers,
        namespace=namespace,
        queues={queue: 1 for queue in queues or handlers}
        | {weight.queue: weight.weight for weight in weights},
        worker_id=worker_id,
        concurrency=concurrency,
        prefetch=prefetch,
        visibility_timeout=visibility_timeout,
        poll_interval=poll_interval,
        pooler=pooler,
        grace_period=grace_period,
        cancel_grace=cancel_grace,
        handler_timeout=handler_timeout or None,
        report_interval=report_interval or None,
        report=report,
        vacuum_interval=vacuum_interval or None,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        housekeeping=not no_housekeeping,
    )
    report.worker_id = runner.worker_id
    # A stop asked for from the start line on is a graceful one: the worker's own handlers
    # replace these when it runs.
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda _signum, _frame: runner.stop())
    log_start()
    runner.run()
    if report_interval:
        report(runner.stats)  # the attempts settled since the last line
