"""The worker runtime: register handlers per queue, then ``run()``.

    handlers = Handlers()

    @handlers.register("send_otp")
    def send_otp(job):
        otp_provider.send(job.payload["user_id"])

    Worker(dsn, handlers, namespace="my-app", concurrency=8).run()

What the runtime does for you:

- **Concurrency.** Up to ``concurrency`` jobs at once: sync handlers on threads, ``async def``
  handlers as tasks on one event loop. More jobs are claimed ahead (the prefetch), to start
  the moment a slot frees (their claims are kept alive by the heartbeats like running ones): by
  default about 0.1 s of the jobs the worker settles, from ``concurrency`` to 500
  (``prefetch.py``), so quick jobs are claimed in big batches and slow ones a few at a time.
  When the queues are empty it waits on LISTEN/NOTIFY (see ``listen.py``) with
  ``poll_interval`` as the fallback poll.
- **Batching.** Jobs that succeed are acknowledged in batches: each round trip to the database
  acknowledges every job that finished since the last one and claims as many new jobs as there
  are free slots, in one statement and one transaction. The worker's own transactions (claims,
  acks, retries) commit asynchronously (``synchronous_commit = off``, set for each of those
  transactions alone: a connection keeps no setting of the worker's): if the database crashes
  in the instant after such a commit, the claim or ack is lost and the job is simply delivered
  again, which at-least-once delivery allows. Transactional handlers commit synchronously.
- **Pooler mode** (``pooler=True``): through PgBouncer in transaction mode the worker keeps no
  session state (no prepared statements, no LISTEN, no advisory lock) and
  polls every ``poll_interval`` (1 s by default).
- **Outcomes.** A handler that returns acks its job. :class:`~postkit.errors.PermanentError`
  fails it into the dead-letter queue, :class:`~postkit.errors.RetryLater` retries it after the
  delay it names, and any other exception nacks it with the error and a traceback summary. A
  job whose payload Python cannot decode (``Job.payload_error``) never reaches its handler: it
  is failed into the dead-letter queue with that error, and the rest of its batch runs.
- **Transactional handlers** (``transactional=True``) receive a cursor in the ack's transaction:
  their writes and the ack commit together, or, when the claim went stale, roll back together.
- **Heartbeats.** Every third of the visibility timeout the claims of running jobs are extended,
  so a long healthy job is never rescued while a dead worker's job expires within one timeout.
- **Recovery.** Every ``tick_interval`` (jittered) the worker calls ``tick_timeouts`` and
  applies retention; many workers ticking at once is safe. A lost connection is retried, at
  most a second apart, so the worker is back within about a second of the server's return.
- **Schedules.** The worker fires its namespace's schedules when they fall due: it looks at the
  next due schedule at least once a second and wakes for it, so a schedule fires within about a
  second of its due time while any worker of the namespace runs.
- **Vacuum.** The worker vacuums the jobs table when claims have left enough dead entries in
  it, one worker at a time (``maintenance/vacuum.py``), so claims stay fast between
  autovacuum's visits.
- **Maintenance off the claim path.** Recovery and schedules run on a thread and a connection
  of their own, retention and vacuum on another (``maintenance/``): a slow step never delays a
  claim, and a slow retention pass never delays a rescue or a schedule.
- **Handler timeouts.** A handler that runs past its timeout (``Handlers.add(timeout=...)``, else
  ``handler_timeout``, an hour by default) has its attempt counted as timed out: its job is
  nacked and no longer heartbeated, and another thread takes its slot.
- **Metrics** (``metrics_port``): Prometheus metrics of the jobs settled, the handlers' run
  times, the claim round trips, notifications and reconnects, served over HTTP while the worker
  runs (``metrics.py``, ``prometheus.py``).
- **Graceful shutdown.** SIGTERM or SIGINT stops claiming; claimed jobs get ``grace_period``
  seconds to finish, then those not started are released (pending again at once, their attempt
  returned). A job whose handler still runs is never released: its claim is kept until the
  handler returns or times out. A second signal exits immediately.
"""

from __future__ import annotations

import functools
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
import psycopg_pool

from postkit.queue import QueueClient
from postkit.worker import defaults
from postkit.worker.backoff import Backoff
from postkit.worker.claims import Claims
from postkit.worker.fetcher import Fetcher
from postkit.worker.handlers import Handlers
from postkit.worker.heartbeat import Heartbeat
from postkit.worker.job_executor import JobExecutor
from postkit.worker.maintenance import (
    JobsVacuum,
    Maintenance,
    Prune,
    Registry,
    Rescue,
    RoundReport,
    Schedules,
)
from postkit.worker.metrics import NO_METRICS, Recorder, require_prometheus_client
from postkit.worker.namespace_shares import NamespaceShares
from postkit.worker.outcomes import OutcomeLog, job_fields
from postkit.worker.pool import WorkerPool
from postkit.worker.prefetch import Prefetch
from postkit.worker.server_guard import ServerGuard
from postkit.worker.shares import Shares
from postkit.worker.signals import stop_on_signals
from postkit.worker.stats import WorkerStats
from postkit.worker.threads import ServiceThreads, start_thread

if TYPE_CHECKING:
    from postkit.worker.prometheus import MetricsEndpoint, PrometheusRecorder

logger = logging.getLogger("postkit.worker")

# The longest wait between two looks at the namespace's next due schedule.
_SCHEDULE_LOOK = 1.0


class Worker:
    """Runs registered handlers for jobs of one namespace. See the module docstring."""

    def __init__(
        self,
        dsn: str,
        handlers: Handlers | Mapping[str, Callable[..., Any]],
        *,
        namespace: str = "default",
        queues: Sequence[str] | Mapping[str, int] | None = None,
        worker_id: str | None = None,
        concurrency: int = defaults.CONCURRENCY,
        prefetch: int | None = None,
        visibility_timeout: float | None = None,
        poll_interval: float | None = None,
        tick_interval: float = defaults.TICK_INTERVAL,
        grace_period: float = defaults.GRACE_PERIOD,
        cancel_grace: float = defaults.CANCEL_GRACE,
        handler_timeout: float | None = defaults.HANDLER_TIMEOUT,
        report_interval: float | None = None,
        report: Callable[[WorkerStats], None] | None = None,
        vacuum_interval: float | None = defaults.VACUUM_INTERVAL,
        pooler: bool = False,
        metrics_port: int | None = None,
        metrics_host: str = defaults.METRICS_HOST,
        housekeeping: bool = True,
        namespace_shares: NamespaceShares | None = None,
        metrics_endpoint: MetricsEndpoint | None = None,
    ) -> None:
        """
        Args:
            dsn: the database. The worker holds one connection to listen on, which also
                carries its heartbeat in the registry, rescues and schedules, and one for
                housekeeping (retention and vacuum); its pool opens up to ``concurrency + 2``
                more while it works and closes each after 10 s unused. An idle worker holds
                two; busy, at most ``concurrency + 4``. In pooler mode there is no listener,
                the claim path's maintenance has a connection of its own, and the pool keeps
                one open.
            handlers: a :class:`Handlers`, or a mapping of queue name to handler function.
            queues: the queues to work (default: every queue with a handler), or a mapping
                of each to its weight (1 to 1000, else 1): while several have jobs, each
                gets its part of the weights of every claim (``postkit.worker.shares``).
            concurrency: how many jobs run at once.
            prefetch: how many more jobs to hold claimed, ready to start; 0 claims only for
                free slots. More prefetch means bigger batches per round trip; less means
                other workers get a fairer share. Default: it adapts, holding about 0.1 s of
                the jobs this worker settles, at least ``concurrency`` and at most 500 (see
                ``postkit.worker.prefetch``).
            worker_id: the name the worker claims under (default: ``hostname-pid``).
            visibility_timeout: seconds each claim lasts between heartbeats, overriding the
                queue's policy (``configure_queue(visibility_timeout=...)``, 30 s unless set).
                Default: the queue's policy.
            poll_interval: the longest wait between pulls when no notification arrives
                (default: 5 s; in pooler mode, where none can arrive, 1 s).
            tick_interval: mean seconds between calls to ``tick_timeouts`` and ``prune``
                (schedules fire when due, whatever this is).
            grace_period: seconds claimed jobs get to finish after a stop is requested. Past
                it the jobs that have not started are released; a job whose handler is still
                running keeps its claim (heartbeats go on) until the handler returns or its
                timeout passes: a job is never released while its handler runs.
            cancel_grace: seconds an ``async def`` handler whose job was cancelled while it
                ran gets to return by itself (``postkit.worker.is_cancelled()`` tells it)
                before its task is cancelled with ``asyncio.CancelledError``. Its slot is given
                back at once, and whatever it returns is dropped. A synchronous handler cannot
                be stopped: it runs on, on a thread of its own.
            handler_timeout: the maximum run time of each handler, in seconds, unless its
                registration names one (see :meth:`Handlers.add` for what happens past it);
                None: no limit, a handler that never returns keeps its job forever.
            report_interval, report: call ``report(stats)`` this often (seconds).
            vacuum_interval: seconds between the vacuum service's looks at the jobs table
                (see ``maintenance/vacuum.py``); None turns the service off and leaves the table to
                autovacuum.
            pooler: ``dsn`` leads to a pooler in transaction mode (PgBouncer's
                ``pool_mode = transaction``), where consecutive statements of one connection
                may run on different server sessions. Pooler mode keeps no session state:
                no prepared statements (``prepare_threshold=None``), no LISTEN (a notification
                would reach whichever client holds the server session next): the worker polls
                every ``poll_interval`` instead, and says so in its log. The vacuum service,
                which holds a session-level advisory lock, is off.
            metrics_port: serve Prometheus metrics on this port while :meth:`run` runs
                (0: a free port, see :attr:`metrics_address`), from a registry of the
                worker's own: see ``postkit.worker.prometheus`` for what they are. Needs
                prometheus_client (``pip install 'postkit-queue[metrics]'``); without this option
                the worker never imports it.
            metrics_host: the address the metrics are served on; ``0.0.0.0`` for every
                interface.
            housekeeping: run retention and the vacuum service here. ``postkit worker
                --processes N`` leaves them to its first process: they serve the whole
                namespace, and each more process would hold a connection for them.
            namespace_shares: the slots ``namespace`` shares with other namespaces' workers
                in this process (:class:`SharedWorker` passes them): ``concurrency`` must be
                theirs, and the worker holds no prefetch.
            metrics_endpoint: record the metrics into this endpoint, which its maker serves
                (a :class:`SharedWorker` serves one for all its namespaces), instead of one of
                the worker's own on ``metrics_port``.

        Raises:
            ValueError: ``queues`` is a str, a queue has no handler, a number is out of
                range, or both ``metrics_port`` and ``metrics_endpoint`` are given.
            postkit.errors.MetricsUnavailableError: ``metrics_port`` is given and
                prometheus_client is not installed.
        """
        self.handlers = handlers if isinstance(handlers, Handlers) else Handlers(handlers)
        if isinstance(queues, str):
            # A str is a sequence of one-letter queues: refused, not served letter by letter.
            raise ValueError(
                f"queues must be a list of queue names or a mapping of each to its weight, got "
                f"the str {queues!r} (one queue: [{queues!r}])"
            )
        self.queues = list(queues) if queues is not None else list(self.handlers)
        missing = [queue for queue in self.queues if queue not in self.handlers]
        if missing or not self.queues:
            raise ValueError(f"no handler for queue(s) {missing or 'any'}")
        self.shares = Shares(self.queues, queues if isinstance(queues, Mapping) else None)
        if (
            concurrency < 1
            or (visibility_timeout is not None and visibility_timeout <= 0)
            or (poll_interval is not None and poll_interval <= 0)
        ):
            raise ValueError("concurrency, visibility_timeout and poll_interval must be positive")
        if namespace_shares is not None and (
            namespace not in namespace_shares.weights
            or concurrency != namespace_shares.concurrency
            or prefetch
        ):
            raise ValueError(
                "a worker sharing slots serves one of their namespaces, with their concurrency "
                "and no prefetch"
            )
        self.namespace_shares = namespace_shares
        self.pooler = pooler
        # Raises ValueError for an interval out of range, before anything starts.
        self._vacuum = (
            None if vacuum_interval is None or pooler else JobsVacuum(interval=vacuum_interval)
        )
        self.dsn = dsn
        self.namespace = namespace
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        # Raises ValueError for a negative prefetch.
        self.prefetch = Prefetch(concurrency, 0 if namespace_shares is not None else prefetch)
        self.visibility_timeout = visibility_timeout
        if poll_interval is None:
            poll_interval = defaults.POOLER_POLL_INTERVAL if pooler else defaults.POLL_INTERVAL
        self.poll_interval = poll_interval
        self.tick_interval = tick_interval
        self.grace_period = grace_period
        if handler_timeout is not None and not handler_timeout > 0:
            raise ValueError("handler_timeout must be positive")
        if not cancel_grace >= 0:
            raise ValueError("cancel_grace must be 0 or more")
        self.handler_timeout = handler_timeout
        self.report_interval = report_interval
        self._report = report
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise ValueError("metrics_port must be from 0 to 65535")
        if metrics_port is not None and metrics_endpoint is not None:
            raise ValueError("metrics_port serves the worker's own metrics: not with an endpoint")
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        self.metrics_address: tuple[str, int] | None = None
        """Where the metrics are served, (host, port), while :meth:`run` serves them."""
        self._prometheus: PrometheusRecorder | None = None
        if metrics_port is not None or metrics_endpoint is not None:
            require_prometheus_client()
            from postkit.worker.prometheus import PrometheusRecorder

            self._prometheus = PrometheusRecorder(
                namespace, self.queues, concurrency=concurrency, endpoint=metrics_endpoint
            )
        self._metrics: Recorder = self._prometheus or NO_METRICS
        self.stats = WorkerStats()
        self._outcomes = OutcomeLog(self.stats, self._metrics)
        self._claims = Claims(self._metrics.handler_ended)
        self._metrics.watch(self._claims)
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._failure: BaseException | None = None
        self._executor = JobExecutor(
            self.handlers,
            self._claims,
            self._outcomes,
            namespace=namespace,
            concurrency=concurrency,
            handler_timeout=handler_timeout,
            cancel_grace=cancel_grace,
            closed=self._closed,
        )
        # Rescue and schedules are quick and due often; retention and vacuum may take long
        # (a big batch, a lock, a VACUUM): two runners, so neither kind waits on the other.
        # The first also keeps the worker in the registry, so it runs until the worker is
        # closed (its claims settled or released): on the listener's connection, between its
        # waits, or in pooler mode on a thread and a connection of its own. The second stops
        # as the shutdown begins.
        self._guard = ServerGuard()
        self._claim_path = Maintenance(
            dsn,
            namespace,
            [
                Registry(
                    self.worker_id,
                    kind="worker",
                    queues=self.queues,
                    concurrency=concurrency,
                    interval=tick_interval,
                ),
                Rescue(interval=tick_interval, jitter=0.5),
                Schedules(interval=_SCHEDULE_LOOK),
            ],
            backoff=Backoff.claim_path(),
            pooler=pooler,
            asynchronous_commit=True,
            guard=self._guard,
        )
        self._housekeeping = (
            Maintenance(
                dsn,
                namespace,
                [
                    Prune(interval=tick_interval, jitter=0.5),
                    *([self._vacuum] if self._vacuum is not None else []),
                ],
                backoff=Backoff.housekeeping(),
                pooler=pooler,
                asynchronous_commit=True,
                guard=self._guard,
            )
            if housekeeping
            else None
        )

    # ---------------------------------------------------------------------------------------
    # Lifecycle
    # ---------------------------------------------------------------------------------------

    def run(self) -> None:
        """Work until :meth:`stop` (or SIGTERM/SIGINT, when called from the main thread), then
        shut down gracefully. Returns after the shutdown. With ``metrics_port`` the metrics
        are served from before the first claim until after the shutdown's last settle.

        Raises:
            postkit.errors.PostkitError: a call the worker's role may not make (or a missing
                schema), on the claim path or in maintenance; the worker shuts down first.
            postkit.errors.MetricsUnavailableError: the metrics address cannot be bound;
                nothing has started.
        """
        if self._prometheus is None or self.metrics_port is None:
            self._work()
            return
        self.metrics_address = self._prometheus.endpoint.serve(self.metrics_host, self.metrics_port)
        host, port = self.metrics_address
        logger.info(
            "serving metrics on http://%s:%d/metrics",
            f"[{host}]" if ":" in host else host,
            port,
            extra={"event": "metrics", "host": host, "port": port},
        )
        try:
            self._work()
        finally:
            self._prometheus.endpoint.close()
            self.metrics_address = None

    def _work(self) -> None:
        stop_on_signals(self.stop, self.grace_period)
        pool = WorkerPool(
            self.dsn,
            namespace=self.namespace,
            max_size=self.concurrency + 2,
            pooler=self.pooler,
            name=f"postkit-worker-{self.worker_id}",
            guard=self._guard,
        )
        self._guard.on_failover(pool.drain)
        fetcher = Fetcher(
            self._claims,
            self._executor,
            self._outcomes,
            pool,
            self._metrics,
            dsn=self.dsn,
            namespace=self.namespace,
            shares=self.shares,
            worker_id=self.worker_id,
            prefetch=self.prefetch,
            visibility_timeout=self.visibility_timeout,
            poll_interval=self.poll_interval,
            pooler=self.pooler,
            stopping=self._stopping,
            closed=self._closed,
            maintenance=None if self.pooler else self._claim_path,
            on_round=self._log_round,
            on_refusal=self._fail,
            guard=self._guard,
            namespace_shares=self.namespace_shares,
        )
        heartbeat = Heartbeat(
            self._claims,
            self._executor,
            pool,
            poll_interval=self.poll_interval,
            closed=self._closed,
        )
        threads = ServiceThreads(
            heartbeat=start_thread(heartbeat.run, "heartbeat"),
            listener=None if self.pooler else start_thread(fetcher.listen, "listener"),
            claim_path=(
                start_thread(
                    functools.partial(self._run_maintenance, self._claim_path, self._closed),
                    "maintenance-claim-path",
                )
                if self.pooler
                else None
            ),
            housekeeping=(
                start_thread(
                    functools.partial(self._run_maintenance, self._housekeeping, self._stopping),
                    "maintenance-housekeeping",
                )
                if self._housekeeping is not None
                else None
            ),
            reporter=(
                start_thread(self._report_loop, "report")
                if self.report_interval and self._report
                else None
            ),
        )
        self._executor.start(
            pool, with_event_loop=any(self.handlers[queue].is_async for queue in self.queues)
        )
        logger.info(
            "worker %s started on %s (namespace %s, concurrency %d)",
            self.worker_id,
            ", ".join(self.queues),
            self.namespace,
            self.concurrency,
            extra={"event": "started", "worker_id": self.worker_id},
        )
        if self.pooler:
            logger.warning(
                "pooler mode: notifications are off (LISTEN does not work through a "
                "transaction pooler), so the worker polls every %gs; no prepared statements, no "
                "session settings, no vacuum service",
                self.poll_interval,
                extra={"event": "notifications_off"},
            )
        try:
            fetcher.run()
        finally:
            self._shutdown(fetcher, heartbeat, pool, threads)
        if self._failure is not None:
            raise self._failure

    def stop(self) -> None:
        """Stop claiming jobs and shut down gracefully; :meth:`run` returns when done.
        Safe to call from any thread or a signal handler."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._claims.wake()

    def _report_loop(self) -> None:
        assert self.report_interval and self._report
        while not self._stopping.wait(self.report_interval):
            self._report(self.stats)

    # ---------------------------------------------------------------------------------------
    # Maintenance, on threads of its own.
    # ---------------------------------------------------------------------------------------

    def _run_maintenance(self, maintenance: Maintenance, until: threading.Event) -> None:
        """Run ``maintenance`` until ``until`` is set. An error it does not retry (a duty this
        role may not do) stops the worker, and :meth:`run` raises it."""
        try:
            maintenance.run_forever(until, self._log_round)
        except BaseException as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        """Stop the worker for ``exc``, which :meth:`run` raises once it has shut down."""
        if self._failure is None:
            self._failure = exc
        self.stop()

    def _log_round(self, done: RoundReport) -> None:
        if done.rescued:
            self._outcomes.count("rescued", done.rescued)
        done.log(logger)

    @staticmethod
    def _stop_maintenance(maintenance: Maintenance | None, thread: threading.Thread | None) -> None:
        """Wait for a maintenance thread to end, cancelling the statement it waits on (a step
        stuck behind a lock must not hold the shutdown), for up to 5 seconds."""
        deadline = time.monotonic() + 5
        while (
            maintenance is not None
            and thread is not None
            and thread.is_alive()
            and time.monotonic() < deadline
        ):
            maintenance.interrupt()
            thread.join(timeout=0.1)

    # ---------------------------------------------------------------------------------------
    # Shutdown.
    # ---------------------------------------------------------------------------------------

    def _shutdown(
        self, fetcher: Fetcher, heartbeat: Heartbeat, pool: WorkerPool, threads: ServiceThreads
    ) -> None:
        """Let claimed jobs finish for the grace period; then release those that never
        started, and keep the claims of those whose handler still runs until it returns or
        times out. A job is never released while its handler runs: another worker would run
        it a second time, at once."""
        self._stopping.set()  # the claim loop may have ended on an error: stop the others
        self._stop_maintenance(self._housekeeping, threads.housekeeping)
        fetcher.drain(time.monotonic() + self.grace_period)
        waiting, running = self._claims.release_waiting()
        for job in waiting:
            try:
                released = pool.run(functools.partial(QueueClient.release, job=job))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                logger.warning("could not release job %d (%s)", job.id, exc)
                continue
            if released:
                self._outcomes.count("released")
                logger.info(
                    "released job %d: not started by the end of the grace period",
                    job.id,
                    extra=job_fields(job, "released"),
                )
        for job in running:
            limit = self._executor.timeout_of(self.handlers[job.queue])
            logger.warning(
                "job %d still running at the end of the grace period: its claim is kept until "
                "its handler returns or %s (a second signal exits now)",
                job.id,
                "never times out" if limit is None else f"its {limit:g}s timeout passes",
                extra=job_fields(job, "still_running"),
            )
        fetcher.drain(math.inf)
        self._closed.set()
        heartbeat.wake()
        # The registry leaves last: the claim path's runner deregisters the worker as it ends,
        # on its thread, or after the listener that lent it its connection.
        self._stop_maintenance(self._claim_path, threads.claim_path)
        if threads.listener is not None:
            fetcher.stop_listener(threads.listener)
            self._claim_path.stop_services()
        fetcher.close(threads.listener)
        if threads.reporter is not None:
            threads.reporter.join(timeout=5)
        self._executor.stop()
        pool.close()
        logger.info(
            "worker %s stopped: %d completed, %d retried, %d dead-lettered, %d released",
            self.worker_id,
            self.stats.completed,
            self.stats.retried,
            self.stats.dead_lettered,
            self.stats.released,
            extra={"event": "stopped", "worker_id": self.worker_id},
        )


__all__ = ["Worker"]
