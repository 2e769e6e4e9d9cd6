"""Running one job: its handler (sync on a thread, ``async def`` on the event loop, or
transactional, in the ack's transaction), then its settle.

A handler that returns acks its job (in the next batched ack, or in its own transaction when
transactional). :class:`~postkit.errors.PermanentError` fails it into the dead-letter queue,
:class:`~postkit.errors.RetryLater` retries it after the delay it names, and any other
exception nacks it with the error and a traceback summary. A job whose payload Python cannot
decode never reaches its handler: it is failed with that error.

What a handler returns, unless None, goes with its ack as the job's result, checked and written
as JSON on the handler's own thread; the SQL module keeps it when the job's queue keeps results
(``retain_results``) and drops it otherwise. A value that cannot be a result (not
JSON-serializable, over 1 MiB as JSON text) does not fail the job, whose work is done: it is
acked without a result (its result reads as None) and the worker logs why, at WARNING the first
time for each queue and at DEBUG after that. The first value a queue's handler returns, the
worker reads the queue's policy, and if the queue keeps no results it logs at WARNING, once,
that what its handlers return is discarded and how to keep it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import queue as stdlib_queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import psycopg
import psycopg_pool

from postkit.queue import Job, Outcome, QueueClient
from postkit.queue.protocol import CheckedResult
from postkit.worker import progress, tracing
from postkit.worker.backoff import Backoff
from postkit.worker.claims import Claims, ClaimState, claim_seconds
from postkit.worker.handlers import HandlerSpec
from postkit.worker.outcomes import (
    OutcomeLog,
    SettleAction,
    job_fields,
    settle_call,
    settlement_of,
)
from postkit.worker.pool import Connections
from postkit.worker.results import Results
from postkit.worker.threads import start_thread
from postkit.worker.workflow import AsyncWorkflowContext, RunParked, pooled_context

logger = logging.getLogger("postkit.worker")

_SETTLE_TRIES = 5
_TRANSACTION_TRIES = 3
# The longest a batch's transaction runs handlers before it commits: the jobs already run wait
# for the commit without heartbeats (their claims hold for the rest of their timeout).
_BATCH_SECONDS = 0.05


class _RolledBack(Exception):
    """Raised inside a transactional handler's transaction to roll it back: its claim went
    stale or its timeout passed, so its writes must not commit."""


class _BatchRolledBack(Exception):
    """Raised inside a batch's transaction to roll it back: a handler raised or ran past its
    timeout, or a job no longer held its claim at the ack, so that job's writes must not
    commit. The others of the batch run again, each in a transaction of its own."""


class JobExecutor:
    """Runs the handlers of claimed jobs and settles each job. See the module docstring."""

    def __init__(
        self,
        handlers: Mapping[str, HandlerSpec],
        claims: Claims,
        outcomes: OutcomeLog,
        *,
        namespace: str,
        concurrency: int,
        handler_timeout: float | None,
        cancel_grace: float,
        closed: threading.Event,
    ) -> None:
        self.handlers = handlers
        self.claims = claims
        self.outcomes = outcomes
        self.namespace = namespace
        self.concurrency = concurrency
        self.handler_timeout = handler_timeout
        self.cancel_grace = cancel_grace
        self._closed = closed
        self._pool: Connections | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._async_slots: asyncio.Semaphore | None = None  # made on the loop's own thread
        self._handler_threads = 0
        # Sync handlers run on `concurrency` threads fed by this queue; there are never more
        # jobs in flight than threads, so a claimed job starts at once.
        self._sync_jobs: stdlib_queue.SimpleQueue[tuple[Job, HandlerSpec]] = (
            stdlib_queue.SimpleQueue()
        )
        # The jobs of batched transactional handlers waiting for a thread, by queue: each also
        # has its entry in _sync_jobs, and the thread that takes one takes its queue's waiting
        # jobs with it, so an entry whose job went with another's batch is passed over.
        self._batched: dict[str, collections.deque[Job]] = collections.defaultdict(
            collections.deque
        )
        self._batched_lock = threading.Lock()
        self._settle_backoff = Backoff.housekeeping(jitter=0.0)
        self._results: Results | None = None

    def start(self, pool: Connections, *, with_event_loop: bool) -> None:
        """Start the handler threads, and the event loop for ``async def`` handlers."""
        self.bind(pool)
        for _ in range(self.concurrency):
            self.start_handler_thread()
        if with_event_loop:
            self._loop = asyncio.new_event_loop()
            start_thread(self._loop.run_forever, "event-loop")

    def bind(self, pool: Connections) -> None:
        """Run the handlers' and the settles' statements on ``pool``."""
        self._pool = pool
        self._results = Results(pool)

    def run_here(self, job: Job) -> None:
        """Run just-claimed ``job`` on this thread as a handler thread or the event loop runs
        it (an ``async def`` handler with ``asyncio.run``), and settle it, its ack included,
        which a worker's fetcher batches: what ``postkit.testing.drain`` runs, with its specs
        unbatched and every transaction a savepoint of the caller's (:meth:`bind`)."""
        assert self._pool is not None
        spec = self.handlers[job.queue]
        self.claims.add(job)
        if spec.is_async and job.payload_error is None:
            asyncio.run(self._run_async_job(job, spec))
        else:
            self._run_sync(job, spec)
        if acks := self.claims.take_finished():
            results = self.claims.results_of(acks)
            jobs = [job for job, _ in acks]
            acked = self._pool.run(lambda client: client.ack_many(jobs, results=results))
            self.claims.forget_results(acks)
            self.outcomes.record_acks(acks, set(acked))

    def stop(self) -> None:
        """Stop the event loop; handler threads are daemons, idle once no job is claimed."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)

    def timeout_of(self, spec: HandlerSpec) -> float | None:
        """The handler's maximum run time: its own, else the worker's."""
        return spec.timeout if spec.timeout is not None else self.handler_timeout

    def dispatch(self, job: Job) -> None:
        """Hand a just-claimed job to a handler thread, or to the event loop."""
        spec = self.handlers[job.queue]
        self.claims.add(job)
        if logger.isEnabledFor(logging.INFO):
            logger.info(
                "claimed job %d (%s, attempt %d of %d)",
                job.id,
                job.queue,
                job.attempts,
                job.max_attempts,
                extra=job_fields(job, "claimed"),
            )
        # A job without a payload to hand over goes to a sync thread, which dead-letters it.
        if spec.batch > 1 and job.payload_error is None:
            with self._batched_lock:
                self._batched[job.queue].append(job)
            self._sync_jobs.put((job, spec))
        elif spec.is_async and job.payload_error is None:
            assert self._loop is not None
            task = asyncio.run_coroutine_threadsafe(self._run_async(job, spec), self._loop)
            self.claims.track_task(job, task)
        else:
            self._sync_jobs.put((job, spec))

    def start_handler_thread(self) -> None:
        self._handler_threads += 1
        start_thread(self._sync_job_loop, f"handler-{self._handler_threads}")

    def settle(
        self,
        job: Job,
        action: SettleAction,
        started: float,
        *,
        error: str | None = None,
        backoff: float | None = None,
    ) -> None:
        """Ack, nack or fail ``job`` under its own claim, retrying a lost connection a few
        times. If it never gets through, the claim expires and the job is redelivered."""
        assert self._pool is not None
        self.claims.begin_settle(job)
        for attempt in range(1, _SETTLE_TRIES + 1):
            if self._closed.is_set():
                return
            try:
                outcome = self._pool.run(
                    lambda client: settle_call(client, job, action, error, backoff)
                )
            except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
                logger.warning(
                    "could not settle job %d (%s); retrying",
                    job.id,
                    exc,
                    extra=job_fields(job, "settle_error"),
                )
                time.sleep(self._settle_backoff.delay(attempt))
                continue
            self.outcomes.record(job, outcome, started, error)
            tracing.settled(outcome)
            return

    # ---------------------------------------------------------------------------------------
    # Synchronous handlers, transactional ones included.
    # ---------------------------------------------------------------------------------------

    def _sync_job_loop(self) -> None:
        while True:
            job, spec = self._sync_jobs.get()
            timed_out = False
            if spec.batch > 1 and job.payload_error is None:
                batch = self._take_batch(job.queue, spec.batch)
                with _settle_errors_logged(job):
                    timed_out = bool(batch) and not self._run_batch(batch, spec)
            else:
                with _settle_errors_logged(job):
                    timed_out = not self._run_sync(job, spec)
            if timed_out:
                return  # another thread took this one's place when the job timed out

    def _take_batch(self, queue: str, most: int) -> list[Job]:
        """Up to ``most`` of the jobs of ``queue`` waiting for a thread, oldest first."""
        with self._batched_lock:
            waiting = self._batched[queue]
            return [waiting.popleft() for _ in range(min(most, len(waiting)))]

    def _run_sync(self, job: Job, spec: HandlerSpec) -> bool:
        """Run one job's handler and settle the job. Returns False when the handler ran past
        its timeout (its thread was replaced meanwhile)."""
        if job.payload_error is not None:
            # Python cannot decode what the SQL API accepted: no handler can run it, now or on
            # a retry, so it fails for good with the reason, and the rest of the batch runs.
            self.claims.claim_outcome(job)  # being settled: the heartbeat leaves it alone
            try:
                self.settle(job, "fail", time.monotonic(), error=job.payload_error)
            finally:
                self.claims.finish(job)
            return True
        started = self.claims.start(job, self.timeout_of(spec))
        if started is None:
            return True
        with (
            tracing.job_span(job, self.namespace),
            progress.reporting(job, self._report, self.claims.is_lost),
        ):
            return self._run_sync_handler(job, spec, started)

    def _run_sync_handler(self, job: Job, spec: HandlerSpec, started: float) -> bool:
        value = None
        try:
            if spec.transactional:
                if not self._run_transactional(job, spec):
                    return self._drop_late_outcome(job)
            elif spec.workflow:
                assert self._pool is not None
                value = spec.function(
                    self._handed(job), pooled_context(job, self._pool, self._step_recorded(job))
                )
            else:
                value = spec.function(self._handed(job))
        except RunParked:
            return self._parked(job)
        except BaseException as error:
            if not self.claims.claim_outcome(job):
                return self._drop_late_outcome(job)
            try:
                self._settle_error(job, error, started)
            finally:
                self.claims.finish(job)
            return True
        if spec.transactional:
            self.claims.finish(job)
        elif self.claims.claim_outcome(job):
            self.claims.complete(job, started, self._result_of(job, value))
        else:
            return self._drop_late_outcome(job)
        return True

    def _result_of(self, job: Job, value: object) -> CheckedResult | None:
        assert self._results is not None
        return self._results.result_of(job, value)

    def _step_recorded(self, job: Job) -> Callable[[str], None]:
        """Counts ``job``'s workflow steps in the worker's metrics."""
        return lambda kind: self.outcomes.metrics.step_recorded(job.queue, kind)

    def _parked(self, job: Job) -> bool:
        """A workflow run parked itself (a sleep, a wait, a map), in its own transaction:
        nothing is left to settle, and its slot is free."""
        if self.claims.claim_outcome(job):
            self.claims.finish(job)
            return True
        return self._drop_late_outcome(job)

    def _report(self, job: Job, fraction: float, note: str | None) -> bool:
        """Record a progress report of ``job`` (:func:`postkit.worker.report_progress`) on a
        pooled connection, fenced by its claim."""
        assert self._pool is not None
        return self._pool.run(lambda client: client.report_progress(job, fraction, note=note))

    def _handed(self, job: Job) -> Job:
        """The job as its handler gets it: with its parents' results (``Job.parent_results``,
        one read on a pooled connection) when it has parents; as claimed otherwise."""
        if not job.depends_on:
            return job
        assert self._pool is not None
        results = self._pool.run(lambda client: client.parent_results(job.id))
        return dataclasses.replace(job, parent_results=results)

    def _run_transactional(self, job: Job, spec: HandlerSpec) -> bool:
        """The handler's writes and the ack share one transaction: both commit, or neither.
        Returns False, with the writes rolled back, when the handler ran past its timeout."""
        started = time.monotonic()
        acked = False
        for attempt in range(_TRANSACTION_TRIES):
            handler_ran = False
            try:
                with self._transaction(spec) as cursor:
                    handler_ran = True
                    value = spec.function(self._handed(job), cursor)
                    if not self.claims.claim_outcome(job):
                        raise _RolledBack
                    acked = QueueClient(cursor, namespace=self.namespace).ack(
                        job, result=self._result_of(job, value)
                    )
                    if not acked:
                        raise _RolledBack
                break
            except _RolledBack:
                break
            except psycopg.OperationalError:
                # A pooled connection that died while idle fails before the handler runs:
                # that is no failure of the job, so take another connection (the pool drops
                # the dead one) instead of spending an attempt on it.
                if handler_ran or attempt == _TRANSACTION_TRIES - 1:
                    raise
        if self.claims.ran_late(job):
            return False
        outcome = Outcome.COMPLETED if acked else Outcome.STALE
        self.outcomes.record(job, outcome, started)
        tracing.settled(outcome)
        return True

    @contextlib.contextmanager
    def _transaction(self, spec: HandlerSpec) -> Iterator[Any]:
        """The transaction of a transactional handler: the handler's own (``transaction=``),
        else one on a connection of the pool; an exception leaving it rolls it back."""
        if spec.transaction is not None:
            with spec.transaction() as cursor:
                yield cursor
            return
        assert self._pool is not None
        with self._pool.connection() as connection, connection.transaction():
            yield connection.cursor()

    def _run_batch(self, jobs: list[Job], spec: HandlerSpec) -> bool:
        """Run the handlers of ``jobs`` (one batched transactional handler's) in shared
        transactions, each in a savepoint; see :meth:`Handlers.add` for what ``batch``
        promises. Returns False when a handler ran past its timeout (this thread was replaced
        meanwhile)."""
        in_time = True
        while jobs:
            ran, failed, jobs, on_time = self._batch_transaction(jobs, spec)
            in_time = in_time and on_time
            for job, started, error in failed:
                try:
                    self._settle_error(job, error, started)
                finally:
                    self.claims.finish(job)
            for job in ran:
                self.claims.finish(job)
        return in_time

    def _batch_transaction(
        self, jobs: list[Job], spec: HandlerSpec
    ) -> tuple[list[Job], list[tuple[Job, float, BaseException]], list[Job], bool]:
        """One transaction of a batch: run handlers until the jobs or the batch's time run
        out, ack those that returned, commit. Returns the jobs settled (acked, or run again
        each in a transaction of its own), the one whose handler raised (to settle), the jobs
        left for the next transaction, and whether every handler returned in time.

        No savepoint per job: each costs two round trips, and past 64 of them in one
        transaction every snapshot in the server reads the subtransaction log. A handler that
        raises or runs late rolls back the transaction instead, as a stale claim does."""
        assert self._pool is not None
        ran: list[tuple[Job, float, CheckedResult | None]] = []
        failed: list[tuple[Job, float, BaseException]] = []
        in_time = True
        left: list[Job] = []
        began = time.monotonic()
        budget = min(_BATCH_SECONDS, claim_seconds(jobs[0]) / 6)
        try:
            with self._pool.connection() as connection, connection.transaction():
                cursor = connection.cursor()
                for index, job in enumerate(jobs):
                    if index and time.monotonic() - began > budget:
                        left = jobs[index:]
                        break
                    started = self.claims.start(job, self.timeout_of(spec))
                    if started is None:
                        continue  # released by a stop meanwhile
                    with (
                        tracing.job_span(job, self.namespace),
                        progress.reporting(job, self._report, self.claims.is_lost),
                    ):
                        try:
                            value = spec.function(self._handed(job), cursor)
                        except BaseException as error:
                            if self.claims.claim_outcome(job):
                                tracing.failed(error)
                                failed.append((job, started, error))
                            else:
                                in_time = self._drop_late_outcome(job)
                            left = jobs[index + 1 :]
                            raise _BatchRolledBack(f"job {job.id}'s handler raised") from None
                        if not self.claims.claim_outcome(job):
                            in_time = self._drop_late_outcome(job)
                            left = jobs[index + 1 :]
                            raise _BatchRolledBack(f"job {job.id}'s handler ran past its timeout")
                    ran.append((job, started, self._result_of(job, value)))
                if ran:
                    results = [result for _, _, result in ran]
                    acked = QueueClient(cursor, namespace=self.namespace).ack_many(
                        [job for job, _, _ in ran],
                        results=results if any(r is not None for r in results) else None,
                    )
                    if len(acked) != len(ran):
                        raise _BatchRolledBack("a claim went stale")
        except (_BatchRolledBack, psycopg.Error) as exc:
            # Everything rolled back: each job that ran goes again, alone, where its own ack
            # decides (a stale claim's writes roll back with it). The job whose handler raised
            # keeps that outcome; its writes are gone with the rest.
            if ran:
                logger.log(
                    logging.WARNING
                    if not isinstance(exc, _BatchRolledBack) or not failed
                    else logging.DEBUG,
                    "a batch of %d job(s) of queue %s rolled back (%s); each runs again in a "
                    "transaction of its own",
                    len(ran),
                    jobs[0].queue,
                    exc,
                    extra={"event": "batch_rolled_back"},
                )
            for job, _, _ in ran:
                with _settle_errors_logged(job):
                    in_time = self._run_transactional(job, spec) and in_time
            return [job for job, _, _ in ran], failed, left, in_time
        for job, started, _ in ran:
            self.outcomes.record(job, Outcome.COMPLETED, started)
        return [job for job, _, _ in ran], failed, left, in_time

    def _drop_late_outcome(self, job: Job) -> bool:
        assert self._pool is not None
        lost = self.claims.drop_late_outcome(job) is ClaimState.LOST
        if self.handlers[job.queue].holds_pool_connection:
            self._pool.resize(-1)  # its connection is back in the pool
        if lost:
            tracing.failed("the job's claim was lost: its outcome is dropped")
            logger.info(
                "the handler of job %d ended after its claim was lost (cancelled, or rescued "
                "and settled elsewhere): its outcome is dropped",
                job.id,
                extra=job_fields(job, "lost_outcome"),
            )
            return False
        tracing.failed("the handler ran past its timeout: its outcome is dropped")
        logger.warning(
            "the handler of job %d ended after its timeout: its outcome is dropped (the "
            "attempt was counted as timed out)",
            job.id,
            extra=job_fields(job, "late_outcome"),
        )
        return False

    def lose(self, job: Job) -> None:
        """The heartbeat found ``job``'s claim lost: give its slot back now (a running
        synchronous handler's to a new thread, since its own runs on), and tell its handler
        (``is_cancelled()``); an ``async def`` one is cancelled after ``cancel_grace``
        seconds, unless it has returned by then."""
        assert self._pool is not None
        state, task = self.claims.lose(job)
        spec = self.handlers[job.queue]
        if state is not ClaimState.RUNNING:
            return
        if task is not None:
            assert self._loop is not None
            # call_later runs on the loop's thread; a task done by then ignores the cancel.
            self._loop.call_soon_threadsafe(self._loop.call_later, self.cancel_grace, task.cancel)
        logger.warning(
            "lost the claim of job %d while its handler runs (cancelled, or rescued and "
            "settled elsewhere): its slot is given back%s",
            job.id,
            "" if spec.is_async else ", its handler thread runs on, its outcome dropped",
            extra=job_fields(job, "claim_lost"),
        )
        if not spec.is_async:
            self.start_handler_thread()
        if spec.holds_pool_connection:
            self._pool.resize(+1)  # as for a handler past its timeout (heartbeat.py)

    # ---------------------------------------------------------------------------------------
    # Async handlers.
    # ---------------------------------------------------------------------------------------

    async def _run_async(self, job: Job, spec: HandlerSpec) -> None:
        if self._async_slots is None:
            self._async_slots = asyncio.Semaphore(self.concurrency)
        async with self._async_slots:  # prefetched jobs wait here for a slot
            await self._run_async_job(job, spec)

    async def _run_async_job(self, job: Job, spec: HandlerSpec) -> None:
        started = self.claims.start(job, self.timeout_of(spec))
        if started is None:
            return
        with (
            tracing.job_span(job, self.namespace),
            progress.reporting(job, self._report, self.claims.is_lost),
        ):
            await self._run_async_handler(job, spec, started)

    async def _run_async_handler(self, job: Job, spec: HandlerSpec, started: float) -> None:
        try:
            handed = await asyncio.to_thread(self._handed, job) if job.depends_on else job
            if spec.workflow:
                assert self._pool is not None
                context = await asyncio.to_thread(
                    pooled_context, job, self._pool, self._step_recorded(job)
                )
                value = await spec.function(handed, AsyncWorkflowContext(context))
            else:
                value = await spec.function(handed)
        except RunParked:
            self._parked(job)
            return
        except BaseException as error:
            if not self.claims.claim_outcome(job):
                self._drop_late_outcome(job)
                return
            try:
                with _settle_errors_logged(job):
                    # to_thread runs it in the job's context, so the settle reaches its span.
                    await asyncio.to_thread(self._settle_error, job, error, started)
            finally:
                self.claims.finish(job)
        else:
            if self.claims.claim_outcome(job):
                self.claims.complete(job, started, self._result_of(job, value))
            else:
                self._drop_late_outcome(job)

    def _settle_error(self, job: Job, error: BaseException, started: float) -> None:
        tracing.failed(error)
        settlement = settlement_of(error)
        self.settle(
            job, settlement.action, started, error=settlement.error, backoff=settlement.backoff
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
            extra=job_fields(job, "settle_error"),
        )


__all__ = ["JobExecutor"]
