"""The worker runtime: register handlers per queue, then ``run()``.

    handlers = Handlers()

    @handlers.register("send_otp")
    def send_otp(job):
        otp_provider.send(job.payload["user_id"])

    Worker(dsn, handlers, namespace="my-app", concurrency=8).run()

What the runtime does for you:

- **Concurrency.** Up to ``concurrency`` jobs at once: sync handlers on threads, ``async def``
  handlers as tasks on one event loop. Up to ``prefetch`` more jobs are claimed ahead, to start
  the moment a slot frees (their claims are kept alive by the heartbeats like running ones).
  When the queues are empty it waits on LISTEN/NOTIFY (see ``listen.py``) with
  ``poll_interval`` as the fallback poll.
- **Batching.** Jobs that succeed are acknowledged in batches: each round trip to the database
  acknowledges every job that finished since the last one and claims as many new jobs as there
  are free slots, in one statement and one transaction. The worker's own transactions (claims,
  acks, retries) commit asynchronously (``synchronous_commit = off``): if the database crashes
  in the instant after such a commit, the claim or ack is lost and the job is simply delivered
  again, which at-least-once delivery allows. Transactional handlers commit synchronously.
- **Pooler mode** (``pooler=True``): through PgBouncer in transaction mode the worker keeps no
  session state (no prepared statements, no session settings, no LISTEN, no advisory lock) and
  polls every ``poll_interval`` (1 s by default).
- **Outcomes.** A handler that returns acks its job. :class:`~postkit.errors.PermanentError`
  fails it into the dead-letter queue, :class:`~postkit.errors.RetryLater` retries it after the
  delay it names, and any other exception nacks it with the error and a traceback summary. A
  job whose payload Python cannot decode (``Job.payload_error``) never reaches its handler: it
  is failed into the dead-letter queue with that error, and the rest of its batch runs.
- **Transactional handlers** (``transactional=True``) receive a cursor in the ack's transaction:
  their writes and the ack commit together, or, when the claim went stale, roll back together.
- **Heartbeats.** Every third of the visibility timeout the claims of running jobs are extended,
  so a long healthy job is never reclaimed while a dead worker's job expires within one timeout.
- **Recovery.** Every ``tick_interval`` (jittered) the worker calls ``tick_timeouts`` and
  applies retention; many workers ticking at once is safe. A lost connection is retried, at
  most a second apart, so the worker is back within about a second of the server's return.
- **Schedules.** The worker fires its namespace's schedules when they fall due: it looks at the
  next due schedule at least once a second and wakes for it, so a schedule fires within about a
  second of its due time while any worker of the namespace runs.
- **Vacuum.** A service thread vacuums the jobs table when claims have left enough dead
  entries in it, one worker at a time (``vacuum.py``), so claims stay fast between autovacuum's
  visits.
- **Handler timeouts.** A handler that runs past its timeout (``Handlers.add(timeout=...)``, else
  ``handler_timeout``, an hour by default) has its attempt counted as timed out: its job is
  nacked and no longer heartbeated, and another thread takes its slot.
- **Graceful shutdown.** SIGTERM or SIGINT stops claiming; claimed jobs get ``grace_period``
  seconds to finish, then those not started are released (pending again at once, their attempt
  returned). A job whose handler still runs is never released: its claim is kept until the
  handler returns or times out. A second signal exits immediately.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import inspect
import logging
import math
import os
import queue as stdlib_queue
import random
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
import psycopg_pool

from postkit.errors import PermanentError, RetryLater
from postkit.queue.client import QueueClient
from postkit.queue.job import BrokenSchedule, Job
from postkit.queue.listen import WorkListener
from postkit.queue.vacuum import JobsVacuum

logger = logging.getLogger("postkit.worker")

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_TRACEBACK_FRAMES = 5
_MAX_BACKOFF = 30.0
# The longest wait between two tries to reach the database while it is away: a retry costs
# one connection attempt, and the worker is back within this long of the server accepting
# connections again.
_MAX_RETRY = 1.0
_LISTENER_DOWN_POLL = 1.0
_POOLER_POLL = 1.0
# The longest wait between two looks at the namespace's next due schedule, and the shortest.
_SCHEDULE_LOOK = 1.0
_SCHEDULE_MIN_WAIT = 0.02


@dataclass(frozen=True)
class HandlerSpec:
    """One registered handler."""

    function: Callable[..., Any]
    transactional: bool
    is_async: bool
    timeout: float | None = None
    """The handler's maximum run time in seconds; None: the worker's ``handler_timeout``."""


class Handlers(Mapping[str, HandlerSpec]):
    """Handlers by queue name. A module registers its handlers here; ``postkit worker`` finds
    the module's ``Handlers`` and runs them."""

    def __init__(self, handlers: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._specs: dict[str, HandlerSpec] = {}
        for queue, function in (handlers or {}).items():
            self.add(queue, function)

    def add(
        self,
        queue: str,
        function: Callable[..., Any],
        *,
        transactional: bool = False,
        timeout: float | None = None,
    ) -> None:
        """Run ``function(job)`` for each job of ``queue`` (``function(job, cursor)`` when
        ``transactional``).

        ``timeout`` is the handler's maximum run time in seconds (default: the worker's
        ``handler_timeout``). Past it the attempt counts as timed out: the job is nacked with a
        ``HandlerTimeout`` error (retried with backoff, or dead-lettered with its attempts
        spent) and its claim is no longer extended. An ``async def`` handler is cancelled; a
        synchronous one cannot be stopped (Python cannot kill a thread): it runs on, on a
        thread of its own, and whatever it returns or raises is dropped; a transactional one's
        writes roll back (its ack is not sent), and the worker's pool grows by a connection
        while it holds its own. Another thread takes its slot.

        Raises:
            ValueError: the queue already has a handler, an ``async def`` handler is
                transactional (the ack's transaction lives on a synchronous connection), or
                ``timeout`` is not positive.
        """
        if queue in self._specs:
            raise ValueError(f"queue {queue!r} already has a handler")
        is_async = inspect.iscoroutinefunction(function)
        if is_async and transactional:
            raise ValueError("transactional handlers must be synchronous functions")
        if timeout is not None and not timeout > 0:
            raise ValueError("a handler's timeout must be positive")
        self._specs[queue] = HandlerSpec(function, transactional, is_async, timeout)

    def register(
        self, queue: str, *, transactional: bool = False, timeout: float | None = None
    ) -> Callable[[F], F]:
        """Decorator form of :meth:`add`."""

        def decorate(function: F) -> F:
            self.add(queue, function, transactional=transactional, timeout=timeout)
            return function

        return decorate

    def __getitem__(self, queue: str) -> HandlerSpec:
        return self._specs[queue]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


@dataclass
class WorkerStats:
    """Counters of one worker since it started."""

    acked: int = 0
    retried: int = 0
    dead_lettered: int = 0
    stale: int = 0
    released: int = 0
    reclaimed: int = 0
    started: float = field(default_factory=time.monotonic)

    @property
    def processed(self) -> int:
        return self.acked + self.retried + self.dead_lettered + self.stale


def error_summary(error: BaseException) -> str:
    """'Type: message' and the last frames of the traceback, for the job's error history."""
    frames = traceback.format_tb(error.__traceback__)[-_TRACEBACK_FRAMES:]
    return f"{type(error).__name__}: {error}\n" + "".join(frames)


class Worker:
    """Runs registered handlers for jobs of one namespace. See the module docstring."""

    def __init__(
        self,
        dsn: str,
        handlers: Handlers | Mapping[str, Callable[..., Any]],
        *,
        namespace: str = "default",
        queues: list[str] | None = None,
        worker_id: str | None = None,
        concurrency: int = 8,
        prefetch: int | None = None,
        visibility_timeout: float | None = None,
        poll_interval: float | None = None,
        tick_interval: float = 10.0,
        grace_period: float = 30.0,
        handler_timeout: float | None = 3600.0,
        report_interval: float | None = None,
        report: Callable[[WorkerStats], None] | None = None,
        vacuum_interval: float | None = 2.0,
        pooler: bool = False,
    ) -> None:
        """
        Args:
            dsn: the database; the worker opens a pool of ``concurrency + 2`` connections and
                one more to listen on.
            handlers: a :class:`Handlers`, or a mapping of queue name to handler function.
            queues: the queues to work (default: every queue with a handler).
            concurrency: how many jobs run at once.
            prefetch: how many more jobs to hold claimed, ready to start (default: as many as
                ``concurrency``; 0 claims only for free slots). More prefetch means bigger
                batches per round trip; less means other workers get a fairer share.
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
            handler_timeout: the maximum run time of each handler, in seconds, unless its
                registration names one (see :meth:`Handlers.add` for what happens past it);
                None: no limit, a handler that never returns keeps its job forever.
            report_interval, report: call ``report(stats)`` this often (seconds).
            vacuum_interval: seconds between the vacuum service's looks at the jobs table
                (see ``vacuum.py``); None turns the service off and leaves the table to
                autovacuum.
            pooler: ``dsn`` leads to a pooler in transaction mode (PgBouncer's
                ``pool_mode = transaction``), where consecutive statements of one connection
                may run on different server sessions. Pooler mode keeps no session state:
                no prepared statements (``prepare_threshold=None``), no session settings (the
                worker's bookkeeping then commits synchronously), no LISTEN (a notification
                would reach whichever client holds the server session next): the worker polls
                every ``poll_interval`` instead, and says so in its log. The vacuum service,
                which holds a session-level advisory lock, is off.

        Raises:
            ValueError: a queue has no handler, or a number is out of range.
        """
        self.handlers = handlers if isinstance(handlers, Handlers) else Handlers(handlers)
        self.queues = list(queues) if queues is not None else list(self.handlers)
        missing = [queue for queue in self.queues if queue not in self.handlers]
        if missing or not self.queues:
            raise ValueError(f"no handler for queue(s) {missing or 'any'}")
        if (
            concurrency < 1
            or (visibility_timeout is not None and visibility_timeout <= 0)
            or (poll_interval is not None and poll_interval <= 0)
        ):
            raise ValueError("concurrency, visibility_timeout and poll_interval must be positive")
        if prefetch is not None and prefetch < 0:
            raise ValueError("prefetch must be zero or positive")
        self.pooler = pooler
        self._vacuum = (
            None if vacuum_interval is None or pooler else JobsVacuum(dsn, interval=vacuum_interval)
        )
        self.dsn = dsn
        self.namespace = namespace
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.concurrency = concurrency
        self.prefetch = concurrency if prefetch is None else prefetch
        # Jobs claimed and not yet settled: running, or waiting for a handler slot.
        self.capacity = self.concurrency + self.prefetch
        self.visibility_timeout = visibility_timeout
        if poll_interval is None:
            poll_interval = _POOLER_POLL if pooler else 5.0
        self.poll_interval = poll_interval
        self.tick_interval = tick_interval
        self.grace_period = grace_period
        if handler_timeout is not None and not handler_timeout > 0:
            raise ValueError("handler_timeout must be positive")
        self.handler_timeout = handler_timeout
        self.report_interval = report_interval
        self._report = report
        self.stats = WorkerStats()

        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Condition()
        self._in_flight: dict[int, Job] = {}
        # Jobs whose settle (an ack in a transactional handler's transaction, a nack, a fail)
        # is under way: the heartbeat leaves them alone, since their claim is about to end.
        self._settling: set[int] = set()
        self._queues_registered = False
        # Jobs whose handler runs: when it started and when it times out (time.monotonic()).
        self._started: dict[int, tuple[float, float]] = {}
        # Jobs that ran past their handler's timeout and were nacked, their handler still
        # running: whatever it returns is dropped.
        self._timed_out: set[int] = set()
        self._async_tasks: dict[int, concurrent.futures.Future[None]] = {}
        self._handler_threads = 0
        # When each claimed job's next heartbeat is due (time.monotonic()), by job id.
        self._beats: dict[int, float] = {}
        self._heartbeat_wake = threading.Event()
        # Set when a job leaves _in_flight without a batched ack (a transactional handler, a
        # nack, a fail): its slot is free, and the main loop wakes to fill it.
        self._slot_freed = False
        # Jobs whose handler succeeded, waiting for the next batched ack, with their start time.
        self._finished: list[tuple[Job, float]] = []
        # Set by the listener thread when a job may be ready; cleared by the main loop.
        self._work_hint = threading.Event()
        self._hint_taken = threading.Event()
        # Set while the main loop waits for something to do: only then does the listener
        # thread wait for work (a notification, a due job). While the main loop is claiming,
        # notifications queue up on the listener's connection and are read at the next wait.
        self._idle = threading.Event()
        # Held while claiming, by the main loop or by the listener thread on a wake-up
        # (_claim_on_wake), so the two never claim at once and never overfill the slots.
        self._claiming = threading.Lock()
        self._listener: WorkListener | None = None
        self._schedule_due = True  # the first look fires what fell due while nothing ran
        self._listener_thread: threading.Thread | None = None
        self._vacuum_thread: threading.Thread | None = None
        # Set by the main loop when the database answers again after errors: the listener
        # reconnects at once instead of waiting out its backoff.
        self._database_back = threading.Event()
        self._pool: psycopg_pool.ConnectionPool[psycopg.Connection[Any]] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_slots: asyncio.Semaphore | None = None  # made on the loop's own thread
        self._next_queue = 0
        self._signals = 0
        # Sync handlers run on `concurrency` threads fed by this queue; there are never more
        # jobs in flight than threads, so a claimed job starts at once.
        self._sync_jobs: stdlib_queue.SimpleQueue[tuple[Job, HandlerSpec]] = (
            stdlib_queue.SimpleQueue()
        )

    # ---------------------------------------------------------------------------------------
    # Lifecycle
    # ---------------------------------------------------------------------------------------

    def run(self) -> None:
        """Work until :meth:`stop` (or SIGTERM/SIGINT, when called from the main thread), then
        shut down gracefully. Returns after the shutdown."""
        self._install_signal_handlers()
        self._pool = psycopg_pool.ConnectionPool(
            self.dsn,
            min_size=1,
            max_size=self.concurrency + 2,
            # Autocommit: each of the worker's calls is one statement, hence one transaction
            # and one round trip; the few that need more say so (_with_client).
            kwargs=(
                # No session state through a pooler: no server-side prepared statements.
                {"autocommit": True, "prepare_threshold": None}
                if self.pooler
                else {"autocommit": True}
            ),
            configure=None if self.pooler else _asynchronous_commit,
            # While the server is away the pool's own reconnect attempts back off (1 s, 2 s,
            # 4 s, ...), so that after a long outage its next attempt could come many seconds
            # after the server is back. An attempt gives up after a second instead, and a
            # caller waits at most two for a connection: the worker's own retries (at most a
            # second apart, see _MAX_RETRY) start fresh attempts.
            reconnect_timeout=1.0,
            timeout=2.0,
            open=True,
            name=f"postkit-worker-{self.worker_id}",
        )
        self._start_thread(self._heartbeat_loop, "heartbeat")
        if not self.pooler:
            self._listener_thread = self._start_thread(self._listen_loop, "listener")
        if self._vacuum is not None:
            vacuum = self._vacuum
            self._vacuum_thread = self._start_thread(lambda: vacuum.run(self._closed), "vacuum")
        for _ in range(self.concurrency):
            self._start_handler_thread()
        if any(self.handlers[queue].is_async for queue in self.queues):
            self._loop = asyncio.new_event_loop()
            self._start_thread(self._loop.run_forever, "event-loop")
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
            self._main_loop()
        finally:
            self._shutdown()

    def stop(self) -> None:
        """Stop claiming jobs and shut down gracefully; :meth:`run` returns when done.
        Safe to call from any thread or a signal handler."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def _install_signal_handlers(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_signal(signum: int, _frame: object) -> None:
            self._signals += 1
            if self._signals > 1:
                logger.warning("second signal: exiting now; running jobs will be reclaimed")
                os._exit(128 + signum)
            logger.warning(
                "signal %s: letting jobs finish (up to %.0fs), then releasing those not started",
                signal.Signals(signum).name,
                self.grace_period,
            )
            self.stop()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _start_thread(self, target: Callable[[], object], name: str) -> threading.Thread:
        thread = threading.Thread(target=target, name=f"postkit-{name}", daemon=True)
        thread.start()
        return thread

    # ---------------------------------------------------------------------------------------
    # The main loop: claim, dispatch, wait, tick.
    # ---------------------------------------------------------------------------------------

    def _main_loop(self) -> None:
        failures = 0
        next_tick = next_schedules = last_look = time.monotonic()
        next_report = time.monotonic() + (self.report_interval or 0)
        want_jobs = True
        while not self._stopping.is_set():
            try:
                now = time.monotonic()
                if now >= next_tick:
                    self._tick()
                    next_tick = now + self.tick_interval * random.uniform(0.5, 1.5)
                if now >= next_schedules:
                    next_schedules = now + self._fire_schedules()
                if self.report_interval and self._report and now >= next_report:
                    self._report(self.stats)
                    next_report = now + self.report_interval
                if self._work_hint.is_set():
                    self._work_hint.clear()
                    self._hint_taken.set()
                    want_jobs = True
                with self._claiming:
                    with self._lock:
                        acks, self._finished = self._finished, []
                        self._slot_freed = False
                    free = self.capacity - len(self._in_flight)
                    if acks or (want_jobs and free > 0):
                        if want_jobs and free > 0:
                            last_look = now
                        claimed = self._settle_and_claim(acks, free if want_jobs else 0)
                        # Keep claiming while the queues give jobs; once they run dry, wait for
                        # a notification (or the fallback poll) before asking again.
                        want_jobs = claimed > 0 or (want_jobs and free <= 0)
                        if failures:
                            failures = 0
                            self._database_back.set()
                        continue
                wake_by = min(next_tick, next_schedules)
                if self.report_interval:
                    wake_by = min(wake_by, next_report)
                if free > 0:
                    # Waiting for work, not only for a handler to finish: the listener may
                    # look for some. With every slot taken it stays out of the way; a
                    # notification meanwhile waits on its connection for the next look.
                    self._idle.set()
                # The fallback poll: a notification may have been missed. Without a listener
                # none can come: poll at least every second until it is back (or for good,
                # every poll_interval, in pooler mode).
                poll = (
                    self.poll_interval
                    if self._listener or self.pooler
                    else min(self.poll_interval, _LISTENER_DOWN_POLL)
                )
                next_poll = last_look + poll
                with self._lock:
                    self._lock.wait_for(
                        lambda: (
                            bool(self._finished)
                            or self._slot_freed
                            or self._work_hint.is_set()
                            or self._stopping.is_set()
                        ),
                        timeout=max(min(next_poll, wake_by) - now, 0.0),
                    )
                self._idle.clear()
                if time.monotonic() >= next_poll:
                    want_jobs = True
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                failures += 1
                # Drop every pooled connection that died with this one (a server restart
                # kills them all), so the next try gets a live one instead of meeting the dead
                # ones one backoff at a time. The first retries come quickly.
                with contextlib.suppress(Exception):
                    if self._pool is not None:
                        self._pool.check()
                delay = min(_MAX_RETRY, 0.1 * 2 ** min(failures, 9)) * random.uniform(0.5, 1)
                logger.warning(
                    "database error (%s); retrying in %.1fs",
                    exc,
                    delay,
                    extra={"event": "db_error"},
                )
                self._stopping.wait(delay)

    def _settle_and_claim(
        self,
        acks: list[tuple[Job, float]],
        limit: int,
        run: Callable[[Callable[[QueueClient], Any]], Any] | None = None,
    ) -> int:
        """One transaction: acknowledge ``acks`` and claim up to ``limit`` jobs, trying the
        queues in turn from a rotating start, on a pooled connection unless ``run`` gives
        another. Returns how many jobs it claimed."""
        first = self._next_queue
        self._next_queue = (self._next_queue + 1) % len(self.queues)
        try:
            acked, jobs = (run or self._with_client)(
                functools.partial(
                    self._ack_and_pull, acks=[job for job, _ in acks], limit=limit, first=first
                )
            )
        except BaseException:
            # Nothing was acknowledged (the statement rolled back): try these again next time.
            with self._lock:
                self._finished[:0] = acks
            raise
        self._record_acks(acks, set(acked))
        for job in jobs:
            self._dispatch(job)
        return len(jobs)

    def _ack_and_pull(
        self, client: QueueClient, *, acks: list[Job], limit: int, first: int
    ) -> tuple[list[int], list[Job]]:
        if limit <= 0:
            return client.ack_many(acks), []
        count = len(self.queues)
        order = [self.queues[(first + offset) % count] for offset in range(count)]
        acked, jobs = client.ack_and_pull(
            order[0],
            acks,
            limit=limit,
            worker_id=self.worker_id,
            visibility_timeout=self.visibility_timeout,
        )
        for queue in order[1:]:
            if len(jobs) >= limit:
                break
            jobs += client.pull_batch(
                queue,
                limit=limit - len(jobs),
                worker_id=self.worker_id,
                visibility_timeout=self.visibility_timeout,
            )
        return acked, jobs

    def _listen_loop(self) -> None:
        """Turn notifications into wake-ups for the main loop, on a connection of its own.

        A lost connection is retried with backoff, cut short when the main loop reaches the
        database again: after a restart the listener is back as soon as the server is, not
        after a backoff that grew while it was down."""
        listener: WorkListener | None = None
        failures = 0
        while not self._closed.is_set():
            try:
                if listener is None:
                    listener = WorkListener.connect(self.dsn, self.namespace, self.queues)
                    _asynchronous_commit(listener.connection)  # it claims, as the pool does
                    with self._lock:
                        self._listener = listener
                    if failures:
                        logger.info("listener reconnected", extra={"event": "db_back"})
                    failures = 0
                if not self._idle.wait(self.poll_interval):
                    continue
                if self._closed.is_set():
                    break
                if listener.wait_for_work(timeout=self.poll_interval):
                    if self._closed.is_set():
                        break
                    self._claim_on_wake(listener.connection)
                    self._hint_taken.clear()
                    with self._lock:
                        self._work_hint.set()
                        self._lock.notify_all()
                    # Wait until the main loop takes the hint: while every slot is busy a due
                    # job would otherwise make wait_for_work return at once, over and over.
                    while not self._hint_taken.wait(0.5) and not self._closed.is_set():
                        pass
            except psycopg.Error as exc:
                with self._lock:
                    self._listener = None
                if listener is not None:
                    with contextlib.suppress(psycopg.Error):
                        listener.close()
                    listener = None
                if self._closed.is_set():
                    break  # the worker stopped: the connection went with it
                failures += 1
                delay = min(_MAX_RETRY, 0.1 * 2**failures) * random.uniform(0.5, 1)
                # Once, not at every retry of an outage.
                logger.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "listener connection failed (%s); reconnecting in %.1fs",
                    exc,
                    delay,
                    extra={"event": "db_error"},
                )
                self._database_back.clear()
                self._database_back.wait(delay)
        with self._lock:
            self._listener = None
        if listener is not None:
            with contextlib.suppress(psycopg.Error):
                listener.close()

    def _stop_listener(self) -> None:
        """Make the listener thread close its connection and end: its wait is cut short by a
        notification on its wake channel. Called once the worker is closed."""
        with self._lock:
            listener = self._listener
        self._database_back.set()
        self._idle.set()
        if listener is not None:
            with contextlib.suppress(psycopg.Error, psycopg_pool.PoolTimeout):
                # pg_notify is a built-in function: it reads and writes no Postkit table.
                self._with_client(
                    lambda client: client.cursor.execute(
                        "SELECT pg_notify(%s, '')", (listener.wake_channel,)
                    )
                )
        if self._listener_thread is not None:
            self._listener_thread.join(timeout=5)

    def _claim_on_wake(self, connection: psycopg.Connection[Any]) -> None:
        """Claim for the free slots right away when a notification wakes the listener: on the
        listener's thread and its own connection, whose backend has just delivered the
        notification and is awake. Between a push's commit and its handler there is then no
        hand-off to the main loop and no idle pooled backend to wake, each a few hundred
        microseconds on a virtual machine. The main loop is woken next all the same, and goes
        on claiming while the queues give jobs. When it is claiming already, this leaves the
        claim to it."""
        if not self._claiming.acquire(blocking=False):
            return
        try:
            free = self.capacity - len(self._in_flight)
            if free > 0 and not self._stopping.is_set():
                self._settle_and_claim([], free, lambda action: action(self._client_on(connection)))
        except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
            # The main loop, woken next, meets the same trouble and owns the retries.
            logger.debug("claim on wake-up failed (%s); the main loop retries", exc)
        finally:
            self._claiming.release()

    def _tick(self) -> None:
        """The maintenance a deployment would otherwise need crons for, each in a transaction
        of its own: reclaim expired claims, apply retention (schedules: _fire_schedules). Any
        number of workers may do this at once."""
        if not self._queues_registered:
            # Once, at the first tick: the queues served stay known while idle (the command
            # line's typo guard, postkit_queue.known_queues).
            self._with_client(lambda client: client.register_queues(self.queues))
            self._queues_registered = True
        reclaimed = self._with_client(lambda client: client.tick_timeouts())
        if reclaimed:
            self.stats.reclaimed += reclaimed
            logger.info(
                "reclaimed %d expired claim(s)",
                reclaimed,
                extra={"event": "reclaimed", "count": reclaimed},
            )
        pruned = self._with_client(lambda client: client.prune())
        if pruned.completed_jobs or pruned.dead_letters:
            logger.info(
                "retention pruned %d archived job(s) and %d dead letter(s)",
                pruned.completed_jobs,
                pruned.dead_letters,
                extra={"event": "pruned"},
            )

    def _fire_schedules(self) -> float:
        """Fire the namespace's due schedules; return the seconds until the next look.

        The next look comes when the next schedule falls due, and within a second at the
        latest, so that a schedule created or changed meanwhile is fired on time too."""
        # One transaction: the due schedules stay locked until each has fired. Only when the
        # last look found one falling due by now: otherwise a look is one statement.
        fired_now = (
            self._with_client(lambda client: client.tick_schedules(), transaction=True)
            if self._schedule_due
            else []
        )
        for outcome in fired_now:
            if isinstance(outcome, BrokenSchedule):
                logger.error(
                    "schedule %s is broken and no longer fires: %s (save it again to repair it)",
                    outcome.name,
                    outcome.reason,
                    extra={"event": "schedule_broken", "schedule": outcome.name},
                )
                continue
            logger.info(
                "schedule %s fired job %d; next run at %s",
                outcome.name,
                outcome.job_id,
                outcome.next_run_at.isoformat(),
                extra={
                    "event": "schedule_fired",
                    "job_id": outcome.job_id,
                    "schedule": outcome.name,
                },
            )
        due = self._with_client(lambda client: client.next_schedule_at())
        self._schedule_due = due.seconds is not None and due.seconds <= _SCHEDULE_LOOK
        if due.seconds is None:
            return _SCHEDULE_LOOK
        # Not less than a few milliseconds: a schedule another worker is firing stays due
        # until that worker commits.
        return min(max(due.seconds, _SCHEDULE_MIN_WAIT), _SCHEDULE_LOOK)

    def _with_client(self, action: Callable[[QueueClient], T], *, transaction: bool = False) -> T:
        """Run ``action`` on a pooled autocommit connection: each statement commits on its own,
        or, with ``transaction``, all of them together."""
        assert self._pool is not None
        with self._pool.connection() as connection:
            client = self._client_on(connection)
            if not transaction:
                return action(client)
            with connection.transaction():
                return action(client)

    def _client_on(self, connection: psycopg.Connection[Any]) -> QueueClient:
        return QueueClient(connection.cursor(), namespace=self.namespace)

    # ---------------------------------------------------------------------------------------
    # Running one job.
    # ---------------------------------------------------------------------------------------

    def _dispatch(self, job: Job) -> None:
        spec = self.handlers[job.queue]
        with self._lock:
            self._in_flight[job.id] = job
            self._beats[job.id] = time.monotonic() + _claim_seconds(job) / 3
        self._heartbeat_wake.set()
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "claimed job %d (%s, attempt %d of %d)",
                job.id,
                job.queue,
                job.attempts,
                job.max_attempts,
                extra=_job_fields(job, "claimed"),
            )
        # A job without a payload to hand over goes to a sync thread, which dead-letters it.
        if spec.is_async and job.payload_error is None:
            assert self._loop is not None
            task = asyncio.run_coroutine_threadsafe(self._run_async(job, spec), self._loop)
            with self._lock:
                self._async_tasks[job.id] = task
        else:
            self._sync_jobs.put((job, spec))

    def _start_handler_thread(self) -> None:
        self._handler_threads += 1
        self._start_thread(self._sync_job_loop, f"handler-{self._handler_threads}")

    def _sync_job_loop(self) -> None:
        while True:
            job, spec = self._sync_jobs.get()
            timed_out = False
            with _settle_errors_logged(job):
                timed_out = not self._run_sync(job, spec)
            if timed_out:
                return  # another thread took this one's place when the job timed out

    def _start(self, job: Job, spec: HandlerSpec) -> float | None:
        """The handler of ``job`` starts now, unless the job was released meanwhile (a stop):
        then None. From now on its timeout runs."""
        timeout = spec.timeout if spec.timeout is not None else self.handler_timeout
        with self._lock:
            if job.id not in self._in_flight:
                return None
            now = time.monotonic()
            self._started[job.id] = (now, now + timeout if timeout is not None else math.inf)
        self._heartbeat_wake.set()  # it also watches the handlers' timeouts
        return now

    def _claim_outcome(self, job: Job) -> bool:
        """The handler of ``job`` returned or raised: settle it, unless it had already run
        past its timeout (then the job was nacked as timed out, and this returns False)."""
        with self._lock:
            if job.id in self._timed_out:
                return False
            self._started.pop(job.id, None)
            self._settling.add(job.id)
            return True

    def _resize_pool(self, change: int) -> None:
        assert self._pool is not None
        with self._lock:
            self._pool.resize(1, self._pool.max_size + change)

    def _drop_late_outcome(self, job: Job) -> bool:
        with self._lock:
            self._timed_out.discard(job.id)
        if self.handlers[job.queue].transactional:
            self._resize_pool(-1)  # its connection is back in the pool
        logger.warning(
            "the handler of job %d ended after its timeout: its outcome is dropped (the "
            "attempt was counted as timed out)",
            job.id,
            extra=_job_fields(job, "late_outcome"),
        )
        return False

    def _run_sync(self, job: Job, spec: HandlerSpec) -> bool:
        """Run one job's handler and settle the job. Returns False when the handler ran past
        its timeout (its thread was replaced meanwhile)."""
        if job.payload_error is not None:
            # Python cannot decode what the SQL API accepted: no handler can run it, now or on
            # a retry, so it fails for good with the reason, and the rest of the batch runs.
            self._claim_outcome(job)  # being settled: the heartbeat leaves it alone
            try:
                self._settle(job, "fail", time.monotonic(), error=job.payload_error)
            finally:
                self._finish(job)
            return True
        started = self._start(job, spec)
        if started is None:
            return True
        try:
            if spec.transactional:
                if not self._run_transactional(job, spec):
                    return self._drop_late_outcome(job)
            else:
                spec.function(job)
        except BaseException as error:
            if not self._claim_outcome(job):
                return self._drop_late_outcome(job)
            try:
                self._settle_error(job, error, started)
            finally:
                self._finish(job)
            return True
        if spec.transactional:
            self._finish(job)
        elif self._claim_outcome(job):
            self._complete(job, started)
        else:
            return self._drop_late_outcome(job)
        return True

    def _run_transactional(self, job: Job, spec: HandlerSpec) -> bool:
        """The handler's writes and the ack share one transaction: both commit, or neither.
        Returns False, with the writes rolled back, when the handler ran past its timeout."""
        assert self._pool is not None
        started = time.monotonic()
        acked = False
        for attempt in range(3):
            handler_ran = False
            try:
                with self._pool.connection() as connection, connection.transaction() as tx:
                    cursor = connection.cursor()
                    # The handler's writes are the application's: they commit durably.
                    cursor.execute("SET LOCAL synchronous_commit = on")
                    handler_ran = True
                    spec.function(job, cursor)
                    if not self._claim_outcome(job):
                        raise psycopg.Rollback(tx)
                    acked = QueueClient(cursor, namespace=self.namespace).ack(job)
                    if not acked:
                        raise psycopg.Rollback(tx)
                break
            except psycopg.OperationalError:
                # A pooled connection that died while idle fails before the handler runs:
                # that is no failure of the job, so take another connection (the pool drops
                # the dead one) instead of spending an attempt on it.
                if handler_ran or attempt == 2:
                    raise
        if job.id in self._timed_out:
            return False
        self._record(job, "ack" if acked else "stale", started)
        return True

    async def _run_async(self, job: Job, spec: HandlerSpec) -> None:
        if self._async_slots is None:
            self._async_slots = asyncio.Semaphore(self.concurrency)
        async with self._async_slots:  # prefetched jobs wait here for a slot
            await self._run_async_job(job, spec)

    async def _run_async_job(self, job: Job, spec: HandlerSpec) -> None:
        started = self._start(job, spec)
        if started is None:
            return
        loop = asyncio.get_running_loop()
        try:
            await spec.function(job)
        except BaseException as error:
            if not self._claim_outcome(job):
                self._drop_late_outcome(job)
                return
            try:
                with _settle_errors_logged(job):
                    await loop.run_in_executor(None, self._settle_error, job, error, started)
            finally:
                self._finish(job)
        else:
            if self._claim_outcome(job):
                self._complete(job, started)
            else:
                self._drop_late_outcome(job)

    def _settle_error(self, job: Job, error: BaseException, started: float) -> None:
        if isinstance(error, PermanentError):
            self._settle(job, "fail", started, error=error_summary(error))
        elif isinstance(error, RetryLater):
            delay = error.delay
            seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
            self._settle(job, "nack", started, error=error_summary(error), backoff=seconds)
        else:
            self._settle(job, "nack", started, error=error_summary(error))

    def _settle(
        self,
        job: Job,
        action: str,
        started: float,
        *,
        error: str | None = None,
        backoff: float | None = None,
    ) -> None:
        """Ack, nack or fail ``job`` under its own claim, retrying a lost connection a few
        times. If it never gets through, the claim expires and the job is redelivered."""
        self._begin_settle(job)
        for attempt in range(5):
            if self._closed.is_set():
                return
            try:
                outcome = self._with_client(
                    lambda client: _settle_call(client, job, action, error, backoff)
                )
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                logger.warning(
                    "could not settle job %d (%s); retrying",
                    job.id,
                    exc,
                    extra=_job_fields(job, "settle_error"),
                )
                time.sleep(min(_MAX_BACKOFF, 0.2 * 2**attempt))
                continue
            self._record(job, outcome, started, error)
            return

    def _record(self, job: Job, outcome: str, started: float, error: str | None = None) -> None:
        milliseconds = (time.monotonic() - started) * 1000
        counters = {
            "ack": "acked",
            "retried": "retried",
            "dead_lettered": "dead_lettered",
            "stale": "stale",
        }
        with self._lock:
            setattr(self.stats, counters[outcome], getattr(self.stats, counters[outcome]) + 1)
        first_line = (error or "").split("\n", 1)[0]
        messages = {
            "ack": "acked job %d in %.1f ms",
            "retried": "nacked job %d after %.1f ms: will retry (" + first_line + ")",
            "dead_lettered": "dead-lettered job %d after %.1f ms (" + first_line + ")",
            "stale": "job %d finished after %.1f ms but its claim was stale: not settled",
        }
        level = logging.WARNING if outcome == "stale" else logging.INFO
        logger.log(
            level,
            messages[outcome],
            job.id,
            milliseconds,
            extra=_job_fields(job, outcome, duration_ms=round(milliseconds, 3)),
        )

    def _complete(self, job: Job, started: float) -> None:
        """The handler succeeded: free the slot and queue the job for the next batched ack."""
        with self._lock:
            self._in_flight.pop(job.id, None)
            self._settling.discard(job.id)
            self._async_tasks.pop(job.id, None)
            self._finished.append((job, started))
            self._lock.notify_all()

    def _record_acks(self, acks: list[tuple[Job, float]], acked: set[int]) -> None:
        with self._lock:
            self.stats.acked += len(acked)
        for job, started in acks:
            if job.id not in acked:
                self._record(job, "stale", started)
            elif logger.isEnabledFor(logging.INFO):
                milliseconds = (time.monotonic() - started) * 1000
                logger.info(
                    "acked job %d in %.1f ms",
                    job.id,
                    milliseconds,
                    extra=_job_fields(job, "ack", duration_ms=round(milliseconds, 3)),
                )

    def _finish(self, job: Job) -> None:
        """The job was settled (or given up on) by its own thread: free its slot and wake the
        main loop to fill it."""
        with self._lock:
            self._in_flight.pop(job.id, None)
            self._settling.discard(job.id)
            self._async_tasks.pop(job.id, None)
            self._slot_freed = True
            self._lock.notify_all()

    def _begin_settle(self, job: Job) -> None:
        """From now on the job's claim may end at any moment: stop its heartbeats."""
        with self._lock:
            self._settling.add(job.id)

    # ---------------------------------------------------------------------------------------
    # Heartbeats and shutdown.
    # ---------------------------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        """Extend each claim a third of the way through its own timeout, the one its claim
        was made with (the queue's policy, or the worker's override). A job that is being
        settled is left alone: its claim ends with the settle."""
        while not self._closed.is_set():
            self._expire_overdue_handlers()
            now = time.monotonic()
            with self._lock:
                next_timeout = min((end for _, end in self._started.values()), default=math.inf)
                beats = {
                    job_id: due
                    for job_id, due in self._beats.items()
                    if job_id in self._in_flight and job_id not in self._settling
                }
                self._beats = {job_id: self._beats[job_id] for job_id in beats}
                due_jobs = [self._in_flight[job_id] for job_id, due in beats.items() if due <= now]
            if not due_jobs:
                wait = min(*beats.values(), next_timeout, now + self.poll_interval) - now
                self._heartbeat_wake.wait(max(wait, 0.0))
                self._heartbeat_wake.clear()
                continue
            try:
                lost = self._with_client(functools.partial(self._extend_claims, jobs=due_jobs))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                if self._closed.is_set():
                    return
                logger.warning("heartbeat failed (%s)", exc, extra={"event": "heartbeat_error"})
                self._closed.wait(min(1.0, min(_claim_seconds(job) for job in due_jobs) / 6))
                continue
            extended = time.monotonic()
            with self._lock:
                for job in due_jobs:
                    if job.id in lost:
                        self._beats.pop(job.id, None)
                    elif job.id in self._beats:
                        self._beats[job.id] = extended + _claim_seconds(job) / 3
                reported = [
                    job
                    for job in due_jobs
                    if job.id in lost and job.id in self._in_flight and job.id not in self._settling
                ]
            for job in reported:
                logger.warning(
                    "lost the claim of job %d: it was reclaimed or settled elsewhere",
                    job.id,
                    extra=_job_fields(job, "claim_lost"),
                )

    def _expire_overdue_handlers(self) -> None:
        """Count the attempt of each job whose handler ran past its timeout as timed out: nack
        it (the heartbeats stop), cancel an async handler, and give a synchronous one's slot to
        a new thread, since the handler's own thread cannot be stopped."""
        now = time.monotonic()
        with self._lock:
            overdue = [
                (self._in_flight[job_id], started)
                for job_id, (started, end) in self._started.items()
                if end <= now and job_id in self._in_flight and job_id not in self._settling
            ]
            for job, _ in overdue:
                del self._started[job.id]
                self._timed_out.add(job.id)
                self._settling.add(job.id)
                task = self._async_tasks.pop(job.id, None)
                if task is not None:
                    task.cancel()
        for job, started in overdue:
            spec = self.handlers[job.queue]
            limit = spec.timeout if spec.timeout is not None else self.handler_timeout
            logger.warning(
                "job %d ran past its handler timeout (%gs): the attempt counts as timed out%s",
                job.id,
                limit,
                "" if spec.is_async else "; its handler thread runs on, its outcome dropped",
                extra=_job_fields(job, "handler_timeout"),
            )
            if not spec.is_async:
                self._start_handler_thread()
            if spec.transactional:
                # The late handler keeps its pooled connection, in its open transaction, until
                # it returns: the pool grows by one meanwhile, so its slot's new handler and the
                # worker's own calls still get connections.
                self._resize_pool(+1)
            error = f"HandlerTimeout: the handler ran past its {limit:g}s limit"
            try:
                self._settle(job, "nack", started, error=error)
            finally:
                self._finish(job)

    def _extend_claims(self, client: QueueClient, *, jobs: list[Job]) -> set[int]:
        """Extend each claim by its own timeout; return the ids of the jobs whose claim was
        lost."""
        return {
            job.id
            for job in jobs
            if not client.extend_visibility(job, extension=_claim_seconds(job))
        }

    def _drain(self, deadline: float) -> None:
        """Acknowledge the jobs that finish until none is left claimed or ``deadline``
        (time.monotonic()) passes."""
        while True:
            with self._lock:
                self._lock.wait_for(
                    lambda: not self._in_flight or bool(self._finished),
                    timeout=None if deadline == math.inf else max(deadline - time.monotonic(), 0),
                )
                acks, self._finished = self._finished, []
                done = not self._in_flight
            if acks:
                try:
                    self._settle_and_claim(acks, 0)
                except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                    logger.warning("could not acknowledge %d job(s) (%s)", len(acks), exc)
                    time.sleep(_MAX_RETRY)
            if done or time.monotonic() >= deadline:
                return

    def _shutdown(self) -> None:
        """Let claimed jobs finish for the grace period; then release those that never
        started, and keep the claims of those whose handler still runs until it returns or
        times out. A job is never released while its handler runs: another worker would run
        it a second time, at once."""
        self._drain(time.monotonic() + self.grace_period)
        with self._lock:
            waiting = [
                job
                for job_id, job in self._in_flight.items()
                if job_id not in self._started and job_id not in self._settling
            ]
            for job in waiting:
                del self._in_flight[job.id]  # a handler thread that takes it skips it
            running = list(self._in_flight.values())
        for job in waiting:
            try:
                released = self._with_client(functools.partial(QueueClient.release, job=job))
            except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
                logger.warning("could not release job %d (%s)", job.id, exc)
                continue
            if released:
                self.stats.released += 1
                logger.info(
                    "released job %d: not started by the end of the grace period",
                    job.id,
                    extra=_job_fields(job, "released"),
                )
        for job in running:
            spec = self.handlers[job.queue]
            limit = spec.timeout if spec.timeout is not None else self.handler_timeout
            logger.warning(
                "job %d still running at the end of the grace period: its claim is kept until "
                "its handler returns or %s (a second signal exits now)",
                job.id,
                "never times out" if limit is None else f"its {limit:g}s timeout passes",
                extra=_job_fields(job, "still_running"),
            )
        self._drain(math.inf)
        self._closed.set()
        self._heartbeat_wake.set()
        self._stop_listener()
        if self._vacuum_thread is not None:
            self._vacuum_thread.join(timeout=5)  # it ends at once, unless in a VACUUM
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._pool is not None:
            self._pool.close(timeout=5)
        logger.info(
            "worker %s stopped: %d acked, %d retried, %d dead-lettered, %d released",
            self.worker_id,
            self.stats.acked,
            self.stats.retried,
            self.stats.dead_lettered,
            self.stats.released,
            extra={"event": "stopped", "worker_id": self.worker_id},
        )


@contextlib.contextmanager
def _settle_errors_logged(job: Job) -> Iterator[None]:
    """A settle the database rejected (not a lost connection, which is retried) must not kill
    the thread or task running it, or the worker would claim jobs it never runs. The job's claim
    expires and it is redelivered."""
    try:
        yield
    except Exception:
        logger.exception(
            "could not settle job %d: its claim will expire and it will be redelivered",
            job.id,
            extra=_job_fields(job, "settle_error"),
        )


def _claim_seconds(job: Job) -> float:
    """How long ``job``'s claim lasts: the visibility timeout it was claimed with (the
    built-in 30 s for a job that does not say, which a claimed job always does)."""
    if job.visible_until is None or job.claimed_at is None:
        return 30.0
    return (job.visible_until - job.claimed_at).total_seconds()


def _asynchronous_commit(connection: psycopg.Connection[Any]) -> None:
    """Pool connections commit the worker's bookkeeping without waiting for the WAL flush."""
    connection.execute("SET synchronous_commit = off")


def _settle_call(
    client: QueueClient, job: Job, action: str, error: str | None, backoff: float | None
) -> str:
    if action == "ack":
        return "ack" if client.ack(job) else "stale"
    if action == "fail":
        return "dead_lettered" if client.fail(job, error=error) else "stale"
    return client.nack_outcome(job, error=error, backoff=backoff).value


def _job_fields(job: Job, event: str, **more: Any) -> dict[str, Any]:
    return {"event": event, "job_id": job.id, "queue": job.queue, "attempt": job.attempts, **more}


__all__ = ["HandlerSpec", "Handlers", "Worker", "WorkerStats", "error_summary"]
